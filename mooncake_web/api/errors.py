"""Mapping of core errors and bad input onto HTTP errors with clear messages."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

__all__ = ["check_limit", "check_prefix", "compile_regex", "node_of", "store_http_error"]

MAX_PREFIX = 1024
"""Longest key prefix accepted (keys are short identifiers, not documents)."""


def store_http_error(exc: Exception) -> HTTPException:
    """The HTTP error for a store error: 404 not found, 409 conflict, 422 bad argument,
    401/403 auth, 502 anything else (the master is upstream of this server)."""
    from mooncake_core.store.errors import (
        AuthError,
        ConflictError,
        InvalidArgumentError,
        NotFoundError,
    )

    msg = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, NotFoundError):
        return HTTPException(404, msg)
    if isinstance(exc, ConflictError):
        return HTTPException(409, msg)
    if isinstance(exc, InvalidArgumentError):
        return HTTPException(422, msg)
    if isinstance(exc, AuthError):
        return HTTPException(502, f"the master refused the dashboard's token: {msg}")
    return HTTPException(502, f"master: {msg}")


def check_prefix(prefix: str, what: str = "prefix") -> str:
    """``prefix`` when acceptable as a key prefix.

    Raises:
        HTTPException: 422 when too long or holding control characters.
    """
    if len(prefix) > MAX_PREFIX:
        raise HTTPException(422, f"{what} is {len(prefix)} characters; at most {MAX_PREFIX}")
    bad = [c for c in prefix if ord(c) < 32 or ord(c) == 127]
    if bad:
        raise HTTPException(422, f"{what} {prefix!r} holds control character {bad[0]!r}")
    return prefix


def compile_regex(pattern: str) -> Any:
    """Compile a user's regular expression with RE2 (linear time: no ReDoS).

    Returns:
        The compiled pattern (``.search(text)``).

    Raises:
        HTTPException: 422 naming the pattern and the error (malformed, too long, or a
            backtracking-only feature such as backreferences or lookaround).
    """
    from mooncake_core.store.errors import StoreError
    from mooncake_core.store.validation import compile_pattern

    try:
        return compile_pattern(pattern)
    except StoreError as exc:
        raise HTTPException(
            422, exc.message.replace("invalid regex", "malformed regex", 1)
        ) from None


def check_limit(limit: int, cap: int) -> int:
    """``limit`` when within ``1..cap``.

    Raises:
        HTTPException: 422 naming the cap.
    """
    if limit < 1:
        raise HTTPException(422, f"limit must be >= 1, got {limit}")
    if limit > cap:
        raise HTTPException(422, f"limit {limit} is over the cap of {cap} per page")
    return limit


def node_of(segment: str) -> str:
    """Store node of a segment: a node mounts ``<node>`` or ``<node>/<tier>`` (the
    segment's client id carries a pid suffix, so the name is the stable handle)."""
    return segment.split("/", 1)[0]
