"""Serving ``/telemetry`` (JSON) and ``/metrics`` (Prometheus text) from one registry.

Two ways to expose a registry:

* :func:`serve_telemetry` starts a small thread-based HTTP server of its own (for a
  process that has none: a Transfer Engine host, a worker).
* :func:`telemetry_routes` returns ``path -> handler`` callables in the shape the store's
  asyncio server (``mooncake_core.store.metrics_http.serve_http``) takes, so a component
  that already serves ``/health`` mounts the two pages next to it with one dict merge.
  A FastAPI app mounts them with ``Response(content=body, media_type=ctype)``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .prometheus import exposition
from .registry import TelemetryRegistry

__all__ = ["TelemetryServer", "serve_telemetry", "telemetry_routes"]

log = logging.getLogger(__name__)

Handler = Callable[[], tuple[int, str, bytes]]
"""Returns (status, content type, body), like the store's ``metrics_http`` handlers."""

PROMETHEUS_CTYPE = "text/plain; version=0.0.4; charset=utf-8"


def telemetry_routes(registry: TelemetryRegistry) -> dict[str, Handler]:
    """Handlers for ``/telemetry`` and ``/metrics`` over ``registry``.

    Args:
        registry: The process's snapshot registry.

    Returns:
        ``{"/telemetry": ..., "/metrics": ...}``; each handler returns
        ``(200, content_type, body)``.
    """

    def telemetry() -> tuple[int, str, bytes]:
        body = json.dumps(registry.document(), separators=(",", ":")).encode()
        return 200, "application/json", body

    def metrics() -> tuple[int, str, bytes]:
        return 200, PROMETHEUS_CTYPE, exposition(registry)

    return {"/telemetry": telemetry, "/metrics": metrics}


class TelemetryServer:
    """A running telemetry HTTP server (threads; GET only).

    Attributes:
        host: Bound address.
        port: Bound port (useful when 0 was asked for).
    """

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host = str(httpd.server_address[0])
        self.port = int(httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:9201``."""
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> TelemetryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_telemetry(
    registry: TelemetryRegistry,
    host: str = "127.0.0.1",
    port: int = 0,
    extra_routes: dict[str, Handler] | None = None,
) -> TelemetryServer:
    """Serve ``/telemetry``, ``/metrics`` and ``/health`` for ``registry`` in a thread.

    Handlers run in the server's own threads: snapshot functions must be thread-safe
    (every ``snapshot()`` in the project is: it copies under a lock or reads immutable
    values).

    Args:
        registry: What to serve.
        host: Bind address (loopback by default, like every server of the project).
        port: Port (0: any free port, read it from ``.port``).
        extra_routes: More ``path -> handler`` pages (override the defaults).

    Returns:
        The running server.

    Raises:
        OSError: The address cannot be bound (the message names host and port).
    """
    routes = telemetry_routes(registry)
    routes["/health"] = lambda: (
        200,
        "application/json",
        json.dumps(
            {"status": "ok", "name": registry.component.name, "role": registry.component.role}
        ).encode(),
    )
    routes.update(extra_routes or {})

    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handler = routes.get(self.path.split("?", 1)[0])
            if handler is None:
                status, ctype = 404, "text/plain"
                body = f"not found; try {', '.join(sorted(routes))}\n".encode()
            else:
                try:
                    status, ctype, body = handler()
                except Exception:  # a broken handler must not kill the server
                    log.exception("telemetry handler failed")
                    status, ctype, body = 500, "text/plain", b"internal error\n"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every second would flood stderr

    try:
        httpd = ThreadingHTTPServer((host, port), _Handler)
    except OSError as exc:
        raise OSError(
            exc.errno, f"cannot bind telemetry on {host}:{port}: {exc.strerror}"
        ) from None
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="telemetry-http", daemon=True)
    thread.start()
    return TelemetryServer(httpd, thread)
