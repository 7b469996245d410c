"""``mooncake_http_metadata_server``: upstream's HTTP key-value metadata store.

Upstream's Transfer Engine keeps segment descriptors in it (``GET/PUT/DELETE
/metadata?key=K``). Our store clients find segments through the master instead, so this
server is only needed by tools that talk to it directly; it is served so upstream's
scripts (which start it first) run unchanged.
"""

from __future__ import annotations

import argparse
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["main", "make_server"]


def make_server(host: str, port: int) -> ThreadingHTTPServer:
    """A server of ``/metadata?key=K`` (GET, PUT, DELETE), not yet serving."""
    data: dict[str, bytes] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _key(self) -> str | None:
            url = urlsplit(self.path)
            if url.path != "/metadata":
                self._reply(404, b"not found; try /metadata?key=K\n")
                return None
            keys = parse_qs(url.query).get("key")
            if not keys:
                self._reply(400, b"missing key\n")
                return None
            return keys[0]

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            key = self._key()
            if key is not None:
                with lock:
                    value = data.get(key)
                if value is None:
                    self._reply(404, b"not found\n")
                else:
                    self._reply(200, value)

        def do_PUT(self) -> None:
            key = self._key()
            if key is not None:
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with lock:
                    data[key] = body
                self._reply(200, b"metadata updated\n")

        def do_DELETE(self) -> None:
            key = self._key()
            if key is not None:
                with lock:
                    found = data.pop(key, None) is not None
                self._reply(200 if found else 404, b"deleted\n" if found else b"not found\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    """Console script: ``mooncake_http_metadata_server [--host H] [--port 8080]``."""
    p = argparse.ArgumentParser(prog="mooncake_http_metadata_server")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    a = p.parse_args(argv)
    try:
        srv = make_server(a.host, a.port)
    except OSError as exc:
        sys.exit(f"mooncake_http_metadata_server: cannot bind {a.host}:{a.port}: {exc.strerror}")
    print(f"mooncake_http_metadata_server: serving on {a.host}:{a.port}", file=sys.stderr)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
