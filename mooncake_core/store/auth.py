"""Control-plane authentication: a bearer token derived from the cluster secret.

``token = HMAC-SHA256(secret, b"mooncake-control").hexdigest()``; clients send it as gRPC
metadata ``authorization: Bearer <token>``. Deriving it (rather than sending the secret)
keeps the secret itself off the wire, and other purposes (the data-plane handshake) can
derive their own keys from the same secret.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

TOKEN_CONTEXT = b"mooncake-control"
"""HMAC message that derives the control-plane token from the cluster secret."""


def control_token(secret: bytes) -> str:
    """The bearer token for ``secret`` (hex HMAC-SHA256)."""
    return hmac.new(secret, TOKEN_CONTEXT, hashlib.sha256).hexdigest()


def auth_metadata(secret: bytes | None) -> tuple[tuple[str, str], ...]:
    """gRPC metadata to send with each call (empty without a secret)."""
    if secret is None:
        return ()
    return (("authorization", f"Bearer {control_token(secret)}"),)


def read_secret(path: str | Path) -> bytes:
    """Read a cluster secret file (surrounding whitespace ignored).

    Raises:
        ValueError: the file is empty.
        OSError: it cannot be read.
    """
    data = Path(path).read_bytes().strip()
    if not data:
        raise ValueError(f"secret file {path} is empty")
    return data


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without the right bearer token with UNAUTHENTICATED.

    Args:
        secret: the cluster secret.
        on_refused: called with the method name of each refused call (for counters).
    """

    def __init__(self, secret: bytes, on_refused: Callable[[str], None] | None = None) -> None:
        self._expected = f"Bearer {control_token(secret)}".encode()
        self._on_refused = on_refused or (lambda method: None)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        sent = ""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                sent = value if isinstance(value, str) else value.decode("latin-1")
        if hmac.compare_digest(sent.encode(), self._expected):
            return await continuation(handler_call_details)
        self._on_refused(handler_call_details.method)
        handler = await continuation(handler_call_details)
        return _refusing(handler)


_REFUSAL = "missing or wrong cluster token (authorization: Bearer <token>)"


def _refusing(handler: Any) -> Any:
    if handler is None:
        return None

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)
        yield  # never reached; makes this an async generator like the real handler

    kw = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream, **kw)
    return grpc.unary_unary_rpc_method_handler(unary, **kw)
