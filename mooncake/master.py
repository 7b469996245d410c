"""``mooncake_master``: our store master started with upstream's gflags-style flags.

``mooncake_master --default_kv_lease_ttl=500 --port 50051`` starts the same
:class:`~mooncake_core.store.master_service.MasterService` as ``mooncake master``, with
upstream's semantics where they differ from our defaults: the lease is in milliseconds,
and a closed client's segment is removed at once (``unmount_grace_s = 0``), so its name
can be mounted again immediately and its objects are gone, as upstream does.

Flags we map are listed in :data:`MAPPED`; upstream flags that only tune upstream's own
internals are accepted with a warning (:data:`IGNORED`); flags that would change
behaviour we do not provide are refused with one line naming the flag (:data:`REFUSED`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass, field

from ._sizes import parse_duration_ms

__all__ = ["MasterFlags", "main", "parse_flags"]

MAPPED = {
    "port": "gRPC port (default 50051)",
    "rpc_port": "gRPC port (older upstream spelling of --port)",
    "rpc_address": "gRPC bind address (default 127.0.0.1; upstream binds 0.0.0.0)",
    "metrics_port": "/metrics, /health, /get_all_segments port (default 9003)",
    "metrics_host": "bind address of the HTTP endpoints (default: --rpc_address)",
    "default_kv_lease_ttl": "read lease, ms or 500ms/5s/1m (default 5000)",
    "default_kv_soft_pin_ttl": "default soft-pin TTL, ms or with a unit (default 30m)",
    "allow_evict_soft_pinned_objects": "evict soft-pinned objects when full (default true)",
    "eviction_high_watermark_ratio": "usage that starts eviction (default 0.95)",
    "eviction_ratio": "fraction evicted per round (default 0.05)",
    "enable_http_metadata_server": "also serve the HTTP metadata store (default false)",
    "http_metadata_server_port": "its port (default 8080)",
    "http_metadata_server_host": "its bind address (default: --rpc_address)",
    "put_start_discard_timeout_sec": "an unfinished put is dropped after this (default 30)",
    "put_start_release_timeout_sec": "... and its space freed after this (default 600)",
}
IGNORED = {
    "enable_metric_reporting", "rpc_thread_num", "rpc_interface", "rpc_conn_timeout_seconds",
    "rpc_enable_tcp_no_delay", "max_kv_soft_pin_ttl", "memory_allocator", "cluster_id",
    "enable_kv_events", "logtostderr", "v",
    "nof_eviction_ratio", "nof_eviction_high_watermark_ratio", "pod_name", "pod_namespace",
}  # fmt: skip
REFUSED = {
    "enable_ha": "HA masters: use `mooncake master --ha etcd://...`",
    "ha_backend_type": "HA masters: use `mooncake master --ha etcd://...`",
    "ha_backend_connstring": "HA masters: use `mooncake master --ha etcd://...`",
    "root_fs_dir": "SSD tier: use `mooncake store node --ssd-dir`",
    "enable_offload": "SSD tier: use `mooncake store node --ssd-dir`",
    "enable_cxl": "CXL segments are not supported",
    "enable_multi_tenants": "tenants are not supported",
    "config_path": "give the flags on the command line (or use `mooncake master --config`)",
}
_FALSE = {"false", "0", "no", "off"}
_TRUE = {"true", "1", "yes", "on", ""}


@dataclass
class MasterFlags:
    """Parsed flags (upstream's defaults)."""

    port: int = 50051
    rpc_address: str = "127.0.0.1"
    metrics_port: int = 9003
    metrics_host: str | None = None
    lease_ttl_ms: float = 5000.0
    soft_pin_ttl_ms: float = 30 * 60 * 1000.0
    evict_soft_pinned: bool = True
    high_watermark: float = 0.95
    eviction_ratio: float = 0.05
    http_metadata: bool = False
    http_metadata_port: int = 8080
    http_metadata_host: str | None = None
    put_timeout_s: float = 30.0
    put_release_s: float = 600.0
    warnings: list[str] = field(default_factory=list)


class FlagError(ValueError):
    """A flag we refuse or cannot parse (the message names it)."""


def _bool(name: str, v: str) -> bool:
    if v.lower() in _TRUE:
        return True
    if v.lower() in _FALSE:
        return False
    raise FlagError(f"--{name}: expected true or false, got {v!r}")


def _num(name: str, v: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(v)
    except ValueError:
        raise FlagError(f"--{name}: expected a number, got {v!r}") from None


def _split(argv: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            raise FlagError(f"unexpected argument {arg!r} (flags look like --name=value)")
        body = arg.lstrip("-")
        if "=" in body:
            name, value = body.split("=", 1)
            out.append((name, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.append((body, argv[i + 1]))
            i += 1
        else:
            out.append((body, None))
        i += 1
    return out


def parse_flags(argv: list[str]) -> MasterFlags:
    """Upstream's gflags syntax: ``--name=value``, ``--name value``, ``--flag``,
    ``--noflag``, one or two dashes.

    Raises:
        FlagError: an unknown or refused flag, or a value that does not parse.
    """
    f = MasterFlags()
    for name, value in _split(argv):
        if name.startswith("no") and name[2:] in MAPPED | REFUSED and value is None:
            name, value = name[2:], "false"
        v = "" if value is None else value
        if name in REFUSED:
            if v.lower() in _FALSE or (name == "root_fs_dir" and not v):
                continue
            raise FlagError(f"--{name} is not supported here: {REFUSED[name]}")
        if name in IGNORED:
            f.warnings.append(f"--{name} tunes upstream's internals; ignored")
            continue
        if name in ("port", "rpc_port"):
            f.port = int(_num(name, v, int))
        elif name == "rpc_address":
            f.rpc_address = v
        elif name == "metrics_port":
            f.metrics_port = int(_num(name, v, int))
        elif name == "metrics_host":
            f.metrics_host = v
        elif name in ("default_kv_lease_ttl", "default_kv_soft_pin_ttl"):
            ms = parse_duration_ms(v)
            if ms is None or ms <= 0:
                raise FlagError(f"--{name}: expected a duration like 500, 500ms or 5s, got {v!r}")
            if name == "default_kv_lease_ttl":
                f.lease_ttl_ms = ms
            else:
                f.soft_pin_ttl_ms = ms
        elif name == "allow_evict_soft_pinned_objects":
            f.evict_soft_pinned = _bool(name, v)
        elif name == "eviction_high_watermark_ratio":
            f.high_watermark = _num(name, v, float)
        elif name == "eviction_ratio":
            f.eviction_ratio = _num(name, v, float)
        elif name == "enable_http_metadata_server":
            f.http_metadata = _bool(name, v)
        elif name == "http_metadata_server_port":
            f.http_metadata_port = int(_num(name, v, int))
        elif name == "http_metadata_server_host":
            f.http_metadata_host = v
        elif name == "put_start_discard_timeout_sec":
            f.put_timeout_s = _num(name, v, float)
        elif name == "put_start_release_timeout_sec":
            f.put_release_s = _num(name, v, float)
        elif name in ("help", "h", "helpshort"):
            print(_usage())
            sys.exit(0)
        else:
            raise FlagError(f"unknown flag --{name} (see mooncake_master --help)")
    return f


def _usage() -> str:
    lines = ["usage: mooncake_master [--flag=value ...]   (upstream's flags)", ""]
    lines += [f"  --{k:<34} {v}" for k, v in MAPPED.items()]
    lines += ["", "accepted and ignored: " + ", ".join(sorted(IGNORED))]
    lines += ["refused: " + ", ".join(sorted(REFUSED))]
    return "\n".join(lines)


def _config(f: MasterFlags) -> object:
    from mooncake_core.config.models import MasterConfig

    # An upstream eviction ratio of 0 means "no eviction"; ours must be > 0.
    ratio = f.eviction_ratio if f.eviction_ratio > 0 else 1e-9
    if f.put_release_s < f.put_timeout_s:
        raise FlagError(
            f"--put_start_release_timeout_sec ({f.put_release_s:g}) must be at least "
            f"--put_start_discard_timeout_sec ({f.put_timeout_s:g})"
        )
    for name, port in (("port", f.port), ("metrics_port", f.metrics_port)):
        if not 0 <= port <= 65535:
            raise FlagError(f"--{name}: {port} is not a port (0..65535; 0: any free port)")
    return MasterConfig(
        lease_ttl_s=f.lease_ttl_ms / 1000.0,
        soft_pin_ttl_s=f.soft_pin_ttl_ms / 1000.0,
        evict_soft_pinned=f.evict_soft_pinned,
        eviction_high_watermark=f.high_watermark,
        eviction_ratio=ratio,
        put_timeout_s=f.put_timeout_s,
        put_release_s=f.put_release_s,
        unmount_grace_s=0.0,
    )


async def _serve(f: MasterFlags) -> None:
    from mooncake_core.store.master_service import MasterService, ServiceOptions

    opts = ServiceOptions(
        host=f.rpc_address,
        port=f.port,
        # upstream has no such port: any free one (clients learn it from GetReadiness)
        fast_port=0,
        metrics_host=f.metrics_host or f.rpc_address,
        metrics_port=f.metrics_port,
    )
    service = MasterService(_config(f), opts)  # type: ignore[arg-type]
    try:
        await service.start()
    except RuntimeError as exc:
        sys.exit(f"mooncake_master: {exc}")
    meta = None
    if f.http_metadata:
        import threading

        from .metadata_server import make_server

        mhost = f.http_metadata_host or f.rpc_address
        try:
            meta = make_server(mhost, f.http_metadata_port)
        except OSError as exc:
            await service.stop()
            sys.exit(f"mooncake_master: cannot bind the metadata server on {mhost}: {exc}")
        threading.Thread(target=meta.serve_forever, daemon=True).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(
        f"mooncake_master: serving on {f.rpc_address}:{service.port} "
        f"(metrics on {opts.metrics_host}:{service.metrics_port}, "
        f"lease {f.lease_ttl_ms:g} ms)",
        file=sys.stderr,
        flush=True,
    )
    await stop.wait()
    if meta is not None:
        meta.shutdown()
    await service.stop()


def main(argv: list[str] | None = None) -> None:
    """Console script entry point."""
    args = sys.argv[1:] if argv is None else argv
    try:
        flags = parse_flags(args)
    except FlagError as exc:
        sys.exit(f"mooncake_master: {exc}")
    try:
        _config(flags)
    except FlagError as exc:
        sys.exit(f"mooncake_master: {exc}")
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()
        sys.exit(f"mooncake_master: bad flag value: {' '.join(first[1:3]) or first[0]}")
    for w in flags.warnings:
        print(f"mooncake_master: warning: {w}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(flags))


if __name__ == "__main__":
    main()
