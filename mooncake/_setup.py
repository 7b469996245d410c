"""Upstream's ``setup`` arguments -> a started :class:`mooncake_core.store.Client`.

Upstream names the client's segment after ``local_hostname`` plus the port of its
Transfer Engine (``localhost:12345``), picking a free port in 12300..14300
(``MC_STORE_CLIENT_MIN_PORT`` / ``MC_STORE_CLIENT_MAX_PORT``) when the hostname has
none. We do the same: the segment name and ``get_hostname()`` are ``host:port`` and our
Transfer Engine's data server listens on that port.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path

from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions, SegmentSpec
from mooncake_core.store.errors import ErrorCode, InvalidArgumentError, StoreError

from ._sizes import parse_size

log = logging.getLogger("mooncake.store")

MIN_PORT, MAX_PORT = 12300, 14300
PORT_TRIES = 20
MAX_SEGMENT_SIZE = 1 << 48
_PROTOCOLS = {"tcp": "auto", "rdma": "auto", "shm": "shm"}
"""Upstream protocol -> our transport. ``tcp`` becomes ``auto``: same-host peers use
shared memory, other hosts tcp. ``rdma`` is served by tcp/shm here (logged)."""


@dataclass(frozen=True)
class SetupArgs:
    """Upstream's ``setup`` parameters that matter here."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    rdma_devices: str
    master_server_addr: str


def args_from_dict(cfg: dict[str, object]) -> SetupArgs:
    """Upstream's dict form of ``setup`` (the keys ``setup_internal(ConfigDict)`` reads).

    Raises:
        InvalidArgumentError: a required key is missing or a size does not parse.
    """
    for key in ("local_hostname", "metadata_server"):
        if not str(cfg.get(key, "")):
            raise InvalidArgumentError(ErrorCode.INVALID_PARAMS, f"missing required config {key}")
    sizes: dict[str, int] = {}
    for key in ("global_segment_size", "local_buffer_size"):
        raw = cfg.get(key, 16 << 20)
        n = parse_size(raw)
        if n is None:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"config {key}: {raw!r} is not a size (e.g. 16MB)"
            )
        sizes[key] = n
    return SetupArgs(
        local_hostname=str(cfg["local_hostname"]),
        metadata_server=str(cfg["metadata_server"]),
        global_segment_size=sizes["global_segment_size"],
        local_buffer_size=sizes["local_buffer_size"],
        protocol=str(cfg.get("protocol", "tcp")),
        rdma_devices=str(cfg.get("rdma_devices", "")),
        master_server_addr=str(cfg.get("master_server_addr", "127.0.0.1:50051")),
    )


def _split_host(hostname: str) -> tuple[str, int | None]:
    host, sep, port = hostname.rpartition(":")
    if sep and port.isdigit() and host and not host.endswith(":"):
        return host, int(port)
    return hostname, None


def _bind_address(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"local_hostname {host!r} does not resolve: {exc}"
        ) from None


def _port_range() -> tuple[int, int]:
    try:
        lo = int(os.environ.get("MC_STORE_CLIENT_MIN_PORT", MIN_PORT))
        hi = int(os.environ.get("MC_STORE_CLIENT_MAX_PORT", MAX_PORT))
    except ValueError:
        return MIN_PORT, MAX_PORT
    if not 1 <= lo <= hi <= 65535:
        return MIN_PORT, MAX_PORT
    return lo, hi


def _force_tcp() -> bool:
    """Upstream's ``MC_FORCE_TCP`` (1/true/yes/on): every peer over tcp, same-host ones
    too (no shm), as upstream then moves every byte over its TCP transport."""
    return os.environ.get("MC_FORCE_TCP", "").strip().lower() in ("1", "true", "yes", "on")


def _secret() -> bytes | None:
    path = os.environ.get("MOONCAKE_SECRET_FILE")
    if not path:
        return None
    from mooncake_core.store.auth import read_secret

    return read_secret(Path(path).expanduser())


def start_client(a: SetupArgs) -> tuple[Client, str]:
    """A set-up client for ``a`` and its ``host:port`` name.

    Raises:
        StoreError: refused arguments, the master unreachable, or no free port.
    """
    if not a.local_hostname:
        raise InvalidArgumentError(ErrorCode.INVALID_PARAMS, "local_hostname is empty")
    transport = _PROTOCOLS.get(a.protocol)
    if transport is None:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"protocol {a.protocol!r} is not served here (use tcp, rdma or shm)",
        )
    if a.protocol == "rdma":
        log.warning("protocol rdma: served by our tcp/shm transports on this host")
    if transport == "auto" and _force_tcp():
        transport = "tcp"  # upstream's MC_FORCE_TCP: no shared-memory shortcut either
    if not 0 <= a.global_segment_size <= MAX_SEGMENT_SIZE:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"global_segment_size {a.global_segment_size} out of range"
        )
    host, port = _split_host(a.local_hostname)
    bind = _bind_address(host)
    if port is not None:
        ports = [port]
    else:
        lo, hi = _port_range()
        ports = [random.randint(lo, hi) for _ in range(PORT_TRIES)]
    last: StoreError | None = None
    for p in ports:
        name = f"{host}:{p}"
        segs = (SegmentSpec(name, a.global_segment_size),) if a.global_segment_size else ()
        opts = ClientOptions(
            master=a.master_server_addr,
            secret=_secret(),
            segments=segs,
            host=bind,
            data_port=p,
            transport=transport,  # type: ignore[arg-type]
        )
        try:
            return Client(opts).setup(), name
        except StoreError as exc:
            last = exc
            # a taken port or segment name: try another port, as upstream does
            retry = "transfer engine" in exc.message or exc.code == ErrorCode.SEGMENT_ALREADY_EXISTS
            if not retry:
                raise
    assert last is not None
    raise last
