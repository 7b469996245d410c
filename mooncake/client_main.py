"""``mooncake_client``: upstream's standalone store client that dummy clients attach to.

Upstream's ``mooncake_client`` hosts the memory (``--global_segment_size``, 4 GB) and
serves dummy clients (``MooncakeDistributedStore.setup_dummy(pool, buf, "host:50052")``)
on ``--port``. Here it is one of our store clients hosting a segment of that size, plus a
small HTTP endpoint on ``--port`` (``GET /dummy_client``) that tells a dummy client which
master to use. A dummy client then runs its own segment-less store client against that
master, so its objects are placed in this process's segment (its memory is lent, as
upstream) while its bytes move over our Transfer Engine (shm on the same host) rather
than through RPCs to this process. Binds 127.0.0.1 unless ``--host`` names another address.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ._sizes import parse_size
from .master import FlagError, _num, _split

__all__ = ["DISCOVERY_PATH", "ClientFlags", "main", "parse_flags"]

DISCOVERY_PATH = "/dummy_client"
"""Where a dummy client asks for the master address (JSON)."""

IGNORED = {"metadata_server", "device_names", "threads", "logtostderr", "v", "log_dir"}
REFUSED = {
    "enable_offload": "SSD tier: use `mooncake store node --ssd-dir`",
    "tenant_id": "tenants are not supported",
    "enable_http_server": "the client HTTP endpoints are not served",
}


@dataclass
class ClientFlags:
    """Parsed flags (upstream's defaults, our loopback bind)."""

    host: str = "127.0.0.1"
    master: str = "127.0.0.1:50051"
    protocol: str = "tcp"
    port: int = 50052
    global_segment_size: int = 4 << 30
    local_buffer_size: int = 0
    warnings: list[str] = field(default_factory=list)


def parse_flags(argv: list[str]) -> ClientFlags:
    """Upstream's ``mooncake_client`` gflags (``--name=value``, ``--name value``).

    Raises:
        FlagError: an unknown or refused flag, or a value that does not parse.
    """
    f = ClientFlags()
    for name, value in _split(argv):
        v = "" if value is None else value
        if name in REFUSED:
            if v.lower() in ("false", "0", "no", "off") or (name == "tenant_id" and v == "default"):
                continue
            raise FlagError(f"--{name} is not supported here: {REFUSED[name]}")
        if name in IGNORED:
            f.warnings.append(f"--{name} is not used here; ignored")
        elif name == "host":
            f.host = "127.0.0.1" if v in ("0.0.0.0", "") else v
        elif name == "master_server_address":
            f.master = v
        elif name == "protocol":
            f.protocol = v
        elif name == "port":
            f.port = int(_num(name, v, int))
        elif name in ("global_segment_size", "local_buffer_size"):
            n = parse_size(v)
            if n is None:
                raise FlagError(f"--{name}: expected a size like 4GB or 512MB, got {v!r}")
            setattr(f, name, n)
        elif name in ("help", "h", "helpshort"):
            print(_usage())
            sys.exit(0)
        else:
            raise FlagError(f"unknown flag --{name} (see mooncake_client --help)")
    if not 0 < f.port <= 65535:
        raise FlagError(f"--port: {f.port} is not a port (1..65535)")
    if f.global_segment_size <= 0:
        raise FlagError("--global_segment_size must be > 0 (it is the memory lent to dummies)")
    return f


def _usage() -> str:
    return "\n".join(
        [
            "usage: mooncake_client [--flag=value ...]   (upstream's flags)",
            "",
            "  --host                    address to bind and advertise (default 127.0.0.1)",
            "  --master_server_address   master host:port (default 127.0.0.1:50051)",
            "  --protocol                tcp (shm to same-host peers) or rdma (served by tcp)",
            "  --port                    port dummy clients attach to (default 50052)",
            "  --global_segment_size     memory lent to the store (default 4 GB)",
            "  --local_buffer_size       staging buffer (default 0: grown on demand)",
            "",
            "accepted and ignored: " + ", ".join(sorted(IGNORED)),
            "refused: " + ", ".join(sorted(REFUSED)),
        ]
    )


def make_server(host: str, port: int, info: dict[str, str]) -> ThreadingHTTPServer:
    """The dummy-client endpoint: ``GET /dummy_client`` answers ``info`` as JSON (read
    per request, so it can be filled in after the port is bound)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != DISCOVERY_PATH:
                self.send_error(404)
                return
            body = json.dumps(info).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    """Console script entry point."""
    from mooncake_core.store.errors import StoreError

    from ._setup import SetupArgs, start_client

    try:
        f = parse_flags(sys.argv[1:] if argv is None else argv)
    except FlagError as exc:
        sys.exit(f"mooncake_client: {exc}")
    for w in f.warnings:
        print(f"mooncake_client: warning: {w}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    info: dict[str, str] = {}
    try:
        # bound first (a taken port fails before any memory is lent); served once set up
        server = make_server(f.host, f.port, info)
    except OSError as exc:
        sys.exit(f"mooncake_client: cannot listen on {f.host}:{f.port}: {exc.strerror}")
    args = SetupArgs(
        local_hostname="localhost" if f.host == "127.0.0.1" else f.host,
        metadata_server="P2PHANDSHAKE",
        global_segment_size=f.global_segment_size,
        local_buffer_size=f.local_buffer_size,
        protocol=f.protocol,
        rdma_devices="",
        master_server_addr=f.master,
    )
    try:
        client, name = start_client(args)
    except StoreError as exc:
        server.server_close()
        sys.exit(f"mooncake_client: {exc.message}")
    info.update(master_server_address=f.master, protocol=f.protocol, segment=name)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(
        f"mooncake_client: serving dummy clients on {f.host}:{f.port} "
        f"(segment {name}, {f.global_segment_size} bytes, master {f.master})",
        file=sys.stderr,
        flush=True,
    )
    stop.wait()
    server.shutdown()
    client.close()


if __name__ == "__main__":
    main()
