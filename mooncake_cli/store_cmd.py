"""`mooncake store ...`: host a segment, and put/get/list/pin objects on a running master."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mooncake_core.fmt import duration, seconds
from mooncake_core.fmt import size as _size

from .common import (
    ConfigOption,
    JsonOption,
    err,
    fail,
    load,
    out,
    write_stdout,
)
from .serve import serve

if TYPE_CHECKING:
    from mooncake_core.config import ClusterConfig
    from mooncake_core.store.client import Client, Readable
    from mooncake_core.store.client.options import ClientOptions
    from mooncake_core.store.node import NodeOptions

app = typer.Typer(
    help="Store objects: host a segment (node), put/get/ls/stat/rm, pins.",
    no_args_is_help=True,
)

MasterOption = Annotated[
    str | None,
    typer.Option(
        "--master",
        "-m",
        help="Master host:port, or etcd://HOST:PORT/CLUSTER (cluster optional) to follow the HA leader (default: from the config).",
    ),
]
SecretOption = Annotated[
    Path | None,
    typer.Option(
        "--secret-file",
        help="Cluster secret (default: the config's secret file, used when it exists).",
    ),
]
TransportOption = Annotated[
    str, typer.Option("--transport", help="Data path: auto (shm on this host), tcp or shm.")
]

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20}
_UNITS |= {"g": 1 << 30, "gib": 1 << 30, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_size(text: str) -> int:
    """``256MiB``, ``1g``, ``4096`` -> bytes (binary units; ``MB`` is decimal)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise typer.BadParameter(f"bad size {text!r}; use e.g. 256MiB, 1GiB, 4096")
    return int(m.group(1)) * _UNITS[unit]


def parse_duration(text: str) -> float:
    """``30m``, ``90s``, ``2h``, ``1.5`` (seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text.lower())
    if m is None:
        raise typer.BadParameter(f"bad duration {text!r}; use e.g. 30m, 90s, 2h")
    return float(m.group(1)) * _SECONDS[m.group(2)]


def _options(
    config: Path | None, master: str | None, secret_file: Path | None, **kw: Any
) -> ClientOptions:
    from mooncake_core.store.client.options import ClientOptions

    cfg = load(config)
    try:
        return ClientOptions.from_cluster(cfg, master=master, secret_file=secret_file, **kw)
    except (OSError, ValueError) as exc:
        fail(f"cannot read the cluster secret: {exc}")


@contextmanager
def _client(
    config: Path | None, master: str | None, secret_file: Path | None, transport: str = "auto"
) -> Iterator[Client]:
    """A client that hosts nothing (it only uses other processes' segments)."""
    opts = _options(config, master, secret_file, transport=transport, connect_timeout_s=5.0)
    with _client_of(opts) as c:
        yield c


@contextmanager
def _client_of(opts: ClientOptions) -> Iterator[Client]:
    """A client over ``opts``; a store error anywhere inside becomes one line, exit 1."""
    from mooncake_core.store.client import Client
    from mooncake_core.store.errors import StoreError

    try:
        with Client(opts) as c:
            yield c
    except StoreError as exc:
        fail(f"{exc.code.name}: {exc.message}")


def _json(obj: Any) -> None:
    write_stdout(json.dumps(obj, indent=1, default=str))


# --------------------------------------------------------------------------- node
@app.command()
def node(
    name: Annotated[str, typer.Option("--name", help="Node and segment name.")],
    size: Annotated[
        str | None,
        typer.Option(
            "--size",
            help="Segment size, e.g. 256MiB (default: its store_nodes entry, else 256MiB).",
        ),
    ] = None,
    master: MasterOption = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host", help="Data-plane bind address (default: its host's, else 127.0.0.1)."
        ),
    ] = None,
    data_port: Annotated[
        int | None,
        typer.Option(
            "--data-port",
            min=0,
            max=65535,
            help="Transfer Engine port (0: any; default: its store_nodes entry, else 0).",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="/health port (0: any; default: its store_nodes entry, else none).",
        ),
    ] = None,
    ssd_dir: Annotated[
        Path | None,
        typer.Option(
            "--ssd-dir",
            help="SSD tier directory: objects the master offloads are kept there as "
            "checksummed files (its tier files are deleted at start; default: its "
            "store_nodes entry, else no SSD tier).",
        ),
    ] = None,
    ssd_size: Annotated[
        str | None,
        typer.Option(
            "--ssd-size",
            help="SSD tier size limit, e.g. 64GiB (needed with --ssd-dir; default: its "
            "store_nodes entry).",
        ),
    ] = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
) -> None:
    """Host a DRAM segment for the store until SIGTERM/SIGINT (a pure host: no objects).

    With --ssd-dir and --ssd-size the node also keeps an SSD tier: it writes objects the
    master offloads from its segment to files, and reads them back when a reader needs
    them (docs/durability.md). Settings not given come from the config's
    ``store_nodes`` entry called NAME, if any.
    """
    from mooncake_core.store.errors import StoreError
    from mooncake_core.store.node import StoreNode

    try:
        opts = node_options(
            load(config),
            name,
            size=size,
            master=master,
            host=host,
            data_port=data_port,
            metrics_port=metrics_port,
            ssd_dir=ssd_dir,
            ssd_size=ssd_size,
            secret_file=secret_file,
        )
    except (OSError, ValueError) as exc:
        fail(str(exc))

    def ready(n: StoreNode) -> str:
        port = n.metrics_port
        where = f" (health on {opts.metrics_host}:{port})" if port is not None else ""
        ssd = f", SSD tier {opts.ssd_dir} ({_size(opts.ssd_size)})" if opts.ssd_dir else ""
        return (
            f"mooncake store node: serving segment {name} ({_size(opts.size)}) at "
            f"{n.client.transfer_address}{where}, master {opts.client.master}{ssd}"
        )

    serve(
        lambda: StoreNode(opts),
        ready=ready,
        stopping="mooncake store node: shutting down",
        start_errors=(StoreError,),  # its text is "CODE: message"
        stop_on_start_error=True,
    )


def node_options(
    cfg: ClusterConfig,
    name: str,
    *,
    size: str | None = None,
    master: str | None = None,
    host: str | None = None,
    data_port: int | None = None,
    metrics_port: int | None = None,
    ssd_dir: Path | None = None,
    ssd_size: str | None = None,
    secret_file: Path | None = None,
) -> NodeOptions:
    """What ``mooncake store node`` runs with: its flags, else the ``store_nodes`` entry
    called ``name``, else the defaults (the cluster secret is read here).

    Raises:
        ValueError: an SSD directory without a size, or a size without a directory.
        OSError: the secret file exists but cannot be read.
    """
    from mooncake_core.store.client.options import ClientOptions
    from mooncake_core.store.node import NodeOptions

    entry = next((n for n in cfg.store_nodes if n.name == name), None)
    if host is None:
        try:
            host = cfg.host(entry.host).address if entry is not None else "127.0.0.1"
        except KeyError:
            host = "127.0.0.1"
    nbytes = parse_size(size) if size else int(entry.segment_size) if entry else 256 << 20
    if data_port is None:
        data_port = entry.data_port if entry is not None else 0
    if metrics_port is None and entry is not None:
        metrics_port = entry.metrics_port
    if ssd_dir is None and entry is not None:
        ssd_dir = entry.ssd_dir
    if ssd_dir is not None:
        ssd_dir = ssd_dir.expanduser()  # as written in the config: this host's home
    ssd_bytes = parse_size(ssd_size) if ssd_size else int(entry.ssd_size) if entry else 0
    if ssd_dir is not None and ssd_bytes <= 0:
        raise ValueError(f"--ssd-dir {ssd_dir} needs --ssd-size (a size limit > 0)")
    if ssd_dir is None and ssd_size:
        raise ValueError("--ssd-size needs --ssd-dir")
    try:
        client = ClientOptions.from_cluster(
            cfg, master=master, secret_file=secret_file, host=host, data_port=data_port
        )
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the cluster secret: {exc}") from exc
    return NodeOptions(
        name,
        nbytes,
        client,
        host,
        metrics_port,
        ssd_dir=ssd_dir,
        ssd_size=ssd_bytes if ssd_dir is not None else 0,
    )


# ---------------------------------------------------------------------- put / get
@app.command()
def put(
    key: Annotated[str, typer.Argument(help="Object key.")],
    source: Annotated[str, typer.Argument(help="File to store, or - for stdin.")],
    replicas: Annotated[
        int | None, typer.Option("--replicas", "-r", min=1, help="Replicas.")
    ] = None,
    soft_pin: Annotated[bool, typer.Option("--soft-pin", help="Soft-pin the key.")] = False,
    hard_pin: Annotated[bool, typer.Option("--hard-pin", help="Hard-pin the key.")] = False,
    upsert: Annotated[bool, typer.Option("--upsert", help="Replace an existing object.")] = False,
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    transport: TransportOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Store a file (or stdin) under KEY.

    A file is streamed: its size is checked against the store (max_object_size, space)
    before a byte is read, and memory stays bounded by the slice size. Stdin that is not
    a regular file is read into memory, at most max_object_size bytes.
    """
    from mooncake_core.store import ReplicateConfig

    rc = ReplicateConfig(replica_num=replicas, soft_pin=soft_pin, hard_pin=hard_pin)
    opts = _options(config, master, secret_file, transport=transport, connect_timeout_s=5.0)
    limit = int(opts.master_config.max_object_size)
    with contextlib.ExitStack() as stack:
        reader, size = _open_source(source, limit, stack)
        with _client_of(opts) as c:
            try:
                c.put_file(key, reader, size, rc, upsert=upsert)
            except OSError as exc:
                fail(f"cannot read {source}: {exc.strerror or exc}")
            info = c.stat(key)
    if as_json:
        _json({"key": key, "size": size, "replicas": len(info.replicas)})
    else:
        err.print(f"stored {key} ({_size(size)}, {len(info.replicas)} replica(s))")


def _open_source(source: str, limit: int, stack: contextlib.ExitStack) -> tuple[Readable, int]:
    """What ``store put`` reads and its size, known before a byte is read (a regular file
    or stdin redirected from one: streamed; a pipe: read whole, at most ``limit``)."""
    import io
    import os
    import stat as st_mod

    try:
        if source == "-":
            fd = sys.stdin.fileno()
        else:
            fd = stack.enter_context(open(source, "rb")).fileno()  # noqa: SIM115
        mode = os.fstat(fd).st_mode
    except (AttributeError, ValueError, io.UnsupportedOperation):
        fd, mode = -1, 0  # stdin that is no file at all (an in-process runner)
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror or exc}")
    if st_mod.S_ISREG(mode):
        f = stack.enter_context(open(fd, "rb", closefd=False))  # noqa: SIM115
        size = os.fstat(fd).st_size - f.tell()
        if size > limit:
            fail(
                f"{source} is {_size(size)} ({size} bytes); the store's max_object_size "
                f"is {_size(limit)}",
                code=2,
            )
        reader: Readable = f
    elif source != "-":
        fail(f"{source} is not a regular file", code=2)
    else:
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            fail(f"stdin holds more than the store's max_object_size ({_size(limit)})", code=2)
        reader, size = io.BytesIO(data), len(data)
    if size == 0:
        fail(f"{source} is empty; empty values are not stored", code=2)
    return reader, size


@app.command()
def get(
    key: Annotated[str, typer.Argument(help="Object key.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: stdout).")
    ] = None,
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    transport: TransportOption = "auto",
) -> None:
    """Read KEY to a file or to stdout (raw bytes)."""
    with _client(config, master, secret_file, transport) as c:
        data = c.get(key)
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output.write_bytes(data)
        err.print(f"wrote {_size(len(data))} to {output}")


# -------------------------------------------------------------------- read-model
@app.command("ls")
def ls(
    prefix: Annotated[str, typer.Argument(help="Key prefix.")] = "",
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=100_000, help="Page size.")
    ] = 100,
    start_after: Annotated[
        str, typer.Option("--start-after", help="List keys after this one (next page).")
    ] = "",
    regex: Annotated[
        str | None,
        typer.Option("--regex", help="Keep keys of the page matching it (RE2 search)."),
    ] = None,
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    as_json: JsonOption = False,
) -> None:
    """List one page of keys under PREFIX in key order (--start-after for the next page)."""
    pattern = None
    if regex is not None:
        from mooncake_core.store.errors import StoreError
        from mooncake_core.store.validation import compile_pattern

        try:
            pattern = compile_pattern(regex)
        except StoreError as exc:
            fail(exc.message, code=2)
    with _client(config, master, secret_file) as c:
        page = c.list_keys(prefix, start_after, limit)
    rows: list[dict[str, Any]] = [
        {"key": e.key, "size": e.size, "state": e.state.name}
        for e in page.entries
        if pattern is None or pattern.search(e.key)
    ]
    if as_json:
        _json({"entries": rows, "next_start_after": page.next_start_after})
        return
    from rich.table import Table

    from .tables import print_table

    t = Table("key", "size", "state")
    for r in rows:
        t.add_row(r["key"], _size(r["size"]), r["state"])
    print_table(out, t, ("key",))
    if page.next_start_after is not None:
        err.print(f"more: --start-after {page.next_start_after!r}", markup=False)


@app.command()
def stat(
    key: Annotated[str, typer.Argument(help="Object key.")],
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    as_json: JsonOption = False,
) -> None:
    """Size, replicas and their segments, SSD copies, lease and pin of KEY."""
    with _client(config, master, secret_file) as c:
        i = c.stat(key)
    reps = [[[s.segment, s.offset, s.length] for s in r] for r in i.replicas]
    doc = {
        "key": i.key,
        "size": i.size,
        "state": i.state.name,
        "replicas": reps,
        "segments": sorted({s.segment for r in i.replicas for s in r}),
        "ssd_segments": list(i.ssd_segments),
        "lease_remaining_s": i.lease_remaining_s,
        "idle_s": i.idle_s,
        "pin": i.pin.name,
        "pin_remaining_s": i.pin_remaining_s,
    }
    if as_json:
        _json(doc)
        return
    from rich.table import Table

    t = Table("field", "value", show_header=False)
    t.add_row("key", i.key)
    t.add_row("size", f"{i.size} ({_size(i.size)})")
    t.add_row("state", i.state.name)
    for n, r in enumerate(i.replicas):
        t.add_row(f"replica {n}", ", ".join(f"{s.segment}@{s.offset}+{s.length}" for s in r))
    if i.ssd_segments:
        where = ", ".join(i.ssd_segments)
        t.add_row("ssd copy", where + ("" if i.replicas else " (SSD only: staged on read)"))
    t.add_row("lease", seconds(i.lease_remaining_s) if i.lease_remaining_s > 0 else "none")
    pin = i.pin.name.lower()
    if i.pin_remaining_s is not None:
        pin += f" ({duration(i.pin_remaining_s)} left)"
    t.add_row("pin", pin)
    out.print(t)


@app.command()
def exists(
    keys: Annotated[list[str], typer.Argument(help="Keys to check.")],
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    as_json: JsonOption = False,
) -> None:
    """Whether each KEY is readable; exit status 1 if any is missing."""
    with _client(config, master, secret_file) as c:
        found = c.batch_is_exist(keys)
    if as_json:
        _json(dict(zip(keys, found, strict=True)))
    else:
        from rich.table import Table

        t = Table("key", "exists")
        for k, f in zip(keys, found, strict=True):
            t.add_row(k, "yes" if f else "[red]no[/]")
        out.print(t)
    if not all(found):
        raise typer.Exit(1)


# ---------------------------------------------------------------------- removal
@app.command()
def rm(
    key: Annotated[str | None, typer.Argument(help="Key to remove.")] = None,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="Remove every key under it.")
    ] = None,
    regex: Annotated[
        str | None,
        typer.Option("--regex", help="Remove keys matching it (RE2 search, on the master)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Also remove leased objects.")] = False,
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove KEY, or every key under --prefix, or matching --regex."""
    if sum(x is not None for x in (key, prefix, regex)) != 1:
        fail("give exactly one of KEY, --prefix or --regex")
    with _client(config, master, secret_file) as c:
        if key is not None:
            c.remove(key, force=force)
            removed, skipped = 1, 0
        else:
            r = (
                c.remove_by_prefix(prefix, force=force)
                if prefix is not None
                else c.remove_by_regex(regex or "", force=force)
            )
            removed, skipped = r.removed, r.skipped
    if as_json:
        _json({"removed": removed, "skipped": skipped})
    else:
        err.print(
            f"removed {removed}"
            + (f", skipped {skipped} (leased or unfinished)" if skipped else "")
        )


# ------------------------------------------------------------------------- pins
@app.command()
def pin(
    target: Annotated[str, typer.Argument(help="Key prefix (or key with --key).")],
    ttl: Annotated[
        str | None, typer.Option("--ttl", help="Soft pin lifetime, e.g. 30m (default: master's).")
    ] = None,
    hard: Annotated[bool, typer.Option("--hard", help="Hard pin: never evicted, no TTL.")] = False,
    key: Annotated[bool, typer.Option("--key", help="TARGET is one existing key.")] = False,
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    as_json: JsonOption = False,
) -> None:
    """Keep every key under PREFIX resident (also keys written later)."""
    if hard and ttl is not None:
        fail("a hard pin has no TTL; drop --ttl or --hard")
    ttl_s = parse_duration(ttl) if ttl is not None else None
    with _client(config, master, secret_file) as c:
        p = c.pin(target, prefix=not key, hard=hard, ttl_s=ttl_s)
    if as_json:
        _json(_pin_doc(p))
    else:
        err.print(f"pinned {'key' if key else 'prefix'} {target!r} ({_pin_kind(p)})", markup=False)


@app.command()
def unpin(
    target: Annotated[str, typer.Argument(help="Key prefix (or key with --key).")],
    key: Annotated[bool, typer.Option("--key", help="TARGET is a key.")] = False,
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
) -> None:
    """Clear the pin on exactly this prefix (or key)."""
    with _client(config, master, secret_file) as c:
        c.unpin(target, prefix=not key)
    err.print(f"unpinned {'key' if key else 'prefix'} {target!r}", markup=False)


@app.command()
def pins(
    master: MasterOption = None,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    as_json: JsonOption = False,
) -> None:
    """List live pins (keys, then prefixes)."""
    with _client(config, master, secret_file) as c:
        ps = c.list_pins()
    if as_json:
        _json([_pin_doc(p) for p in ps])
        return
    from rich.table import Table

    t = Table("target", "kind", "level", "expires in")
    for p in ps:
        t.add_row(p.target, "prefix" if p.is_prefix else "key", *_pin_kind(p).split(", ", 1))
    out.print(t)


def _pin_doc(p: Any) -> dict[str, Any]:
    import time

    left = None if p.expires_at is None else round(max(0.0, p.expires_at - time.monotonic()), 1)
    return {"target": p.target, "prefix": p.is_prefix, "hard": p.hard, "remaining_s": left}


def _pin_kind(p: Any) -> str:
    if p.hard:
        return "hard, never"
    left = _pin_doc(p)["remaining_s"]
    return f"soft, {duration(left)}"
