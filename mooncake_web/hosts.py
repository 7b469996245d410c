"""The ``Host`` check: the dashboard answers only under the names it is configured for.

A page from another site can make the browser send requests to ``127.0.0.1:8080`` under
its own name (DNS rebinding: ``evil.example`` first resolves to the attacker, then to
loopback). The browser then treats the answers as same-origin and lets that page read
them: every key and the audit trail, since reads are open by default. Refusing a
``Host`` that is not one of the dashboard's own names closes that hole; the port in the
header is ignored (the bind port is what it is).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HostCheck", "allowed_hosts", "host_name"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_ANY = ("0.0.0.0", "::", "")


def host_name(header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8080`` -> ``::1``, ``A:80`` -> ``a``."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:].split("]", 1)[0]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names the dashboard answers to: loopback, the bind address (unless it is a
    wildcard) and ``extra`` (``dashboard.allowed_hosts``, the host's address...)."""
    names = {*LOOPBACK_NAMES, *(host_name(e) for e in extra)}
    if bind not in _ANY:
        names.add(host_name(bind))
    return frozenset(n for n in names if n)


class HostCheck:
    """ASGI middleware: 421 Misdirected Request for a ``Host`` outside ``allowed``.

    Args:
        app: The app to guard.
        allowed: Names as :func:`allowed_hosts` returns them; ``"*"`` allows any.
    """

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or "*" in self.allowed:
            await self.app(scope, receive, send)
            return
        raw = dict(scope.get("headers") or ()).get(b"host", b"")
        name = host_name(raw.decode("latin-1"))
        if name in self.allowed:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = raw.decode("latin-1")[:80]
        body = json.dumps(
            {
                "detail": f"Host {shown!r} is not a name of this dashboard; add it to "
                "dashboard.allowed_hosts if it is (DNS rebinding guard)"
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
