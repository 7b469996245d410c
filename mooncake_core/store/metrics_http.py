"""A tiny asyncio HTTP/1.0 server for /metrics, /health and /snapshot.

It runs on the master's event loop, so handlers read the core directly without locks
(each handler is synchronous and O(segments)). GET only; one request per connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

Handler = Callable[[], tuple[int, str, bytes]]
"""Returns (status, content type, body)."""

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request"}
_MAX_HEADER_BYTES = 16_384


async def serve_http(host: str, port: int, routes: dict[str, Handler]) -> asyncio.Server:
    """Start serving ``routes`` (path -> handler) on ``host:port`` (0: any free port).

    Returns:
        The started server; ``server.sockets[0].getsockname()[1]`` is the port.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, ctype, body = await asyncio.wait_for(_dispatch(reader, routes), 5.0)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            status, ctype, body = 400, "text/plain", b"bad request\n"
        except Exception:  # a broken handler must not kill the server
            log.exception("metrics handler failed")
            status, ctype, body = 500, "text/plain", b"internal error\n"
        head = (
            f"HTTP/1.0 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        try:
            writer.write(head.encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)


async def _dispatch(
    reader: asyncio.StreamReader, routes: dict[str, Handler]
) -> tuple[int, str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > _MAX_HEADER_BYTES:
        raise ValueError("header too large")
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(parts) != 3:
        raise ValueError("bad request line")
    method, target, _ = parts
    if method != "GET":
        return 405, "text/plain", b"GET only\n"
    handler = routes.get(target.split("?", 1)[0])
    if handler is None:
        paths = ", ".join(sorted(routes))
        return 404, "text/plain", f"not found; try {paths}\n".encode()
    return handler()
