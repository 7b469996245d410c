"""Input checks of the master core: each raises a clear error before anything changes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mooncake_core.config.models import MasterConfig

from .errors import CapacityError, ErrorCode, InvalidArgumentError, StoreError
from .results import ReplicateConfig

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741

MAX_REPLICA_NUM = 16
"""Most replicas of one object."""
MAX_NAME = 256
"""Longest segment name or client id."""


def check_key(key: str, max_len: int) -> None:
    """Raise INVALID_KEY unless ``key`` is a non-empty string of at most ``max_len`` UTF-8 bytes.

    A string that has no UTF-8 form (a lone surrogate, as ``os.fsdecode`` makes of a
    command-line argument that is not UTF-8) is refused here, not by the RPC encoder.
    """
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(
            ErrorCode.INVALID_KEY, f"key must be a non-empty string, got {key!r}"
        )
    n = len(utf8_of("key", key, ErrorCode.INVALID_KEY))
    if n > max_len:
        raise InvalidArgumentError(
            ErrorCode.INVALID_KEY, f"key of {n} bytes exceeds max_key_length {max_len}"
        )


def plain_keys(keys: Sequence[object], max_len: int) -> bool:
    """Whether every key surely passes :func:`check_key`: a non-empty ASCII string of
    at most ``max_len`` characters (one byte each). False says nothing: check each."""
    for k in keys:
        if type(k) is not str or not 0 < len(k) <= max_len or not k.isascii():
            return False
    return True


def utf8_of(what: str, text: str, code: ErrorCode = ErrorCode.INVALID_PARAMS) -> bytes:
    """``text`` encoded as UTF-8.

    Raises:
        InvalidArgumentError: ``code``, naming the first character with no UTF-8 form.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            code,
            f"{what} is not valid UTF-8: {text[exc.start : exc.end]!r} at character "
            f"{exc.start} has no UTF-8 form (was it decoded from non-UTF-8 bytes?)",
        ) from None


MAX_PATTERN = 1024
"""Longest user regular expression accepted."""


def compile_pattern(pattern: str) -> Any:
    """Compile a user's regular expression with RE2 (linear time in the text, no ReDoS).

    RE2 is Python ``re`` syntax without backreferences and lookaround; a pattern that
    needs them is refused rather than run on a backtracking engine.

    Returns:
        A compiled RE2 pattern (``.search(text)`` as with ``re``).

    Raises:
        InvalidArgumentError: INVALID_PARAMS for a pattern that is too long, not UTF-8,
            malformed or unsupported by RE2.
    """
    import re2  # google-re2

    if not isinstance(pattern, str):
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"regex must be a string, got {pattern!r}"
        )
    if len(pattern) > MAX_PATTERN:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"regex is {len(pattern)} characters; at most {MAX_PATTERN}"
        )
    utf8_of("regex", pattern)
    opts = re2.Options()
    opts.log_errors = False  # the error goes back to the caller, not to stderr
    try:
        return re2.compile(pattern, opts)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"invalid regex {pattern!r}: {reason}"
        ) from None


def check_name(what: str, value: str) -> None:
    """Raise INVALID_PARAMS unless ``value`` is a name of 1..256 characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"{what} must be 1..{MAX_NAME} characters, got {value!r}",
        )


MAX_ADDRESS = 255


def check_transport_address(value: str) -> None:
    """Raise INVALID_PARAMS unless ``value`` is ``""`` or a Transfer Engine ``host:port``.

    An empty address mounts a segment that holds metadata only (no reader can reach its
    bytes: the in-process tests use it). Anything else must be what the Transfer Engine
    resolves: printable ASCII without spaces or ``/``, a host, and a port in 1..65535.
    A bogus address accepted here would attract later puts that no client can write.
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"transport_address must be a string, got {value!r}"
        )
    if not value:
        return
    host, sep, port = value.rpartition(":")
    ok = (
        len(value) <= MAX_ADDRESS
        and value.isascii()
        and value.isprintable()
        and not any(c.isspace() or c == "/" for c in value)
        and bool(sep and host)
        and port.isdigit()
        and 0 < int(port) < 65536
    )
    if not ok:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"transport_address must be host:port (port 1..65535, at most {MAX_ADDRESS} "
            f"printable characters, no spaces or '/'), got {value[:80]!r}",
        )


def pin_expiry(config: MasterConfig, hard: bool, ttl_s: float | None, now: float) -> float | None:
    """When a new pin ends: ``None`` for hard pins, else ``now + ttl`` (default TTL if None).

    Raises:
        InvalidArgumentError: a TTL on a hard pin, or a TTL that is not a positive number.
    """
    if hard:
        if ttl_s is not None:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, "a hard pin has no TTL; drop ttl or use a soft pin"
            )
        return None
    ttl = config.soft_pin_ttl_s if ttl_s is None else ttl_s
    if not ttl > 0 or math.isinf(ttl):
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"pin TTL must be a positive number, got {ttl_s!r}"
        )
    return now + ttl


def validate_put(
    config: MasterConfig,
    key: str,
    size: int,
    client_id: str,
    cfg: ReplicateConfig,
    usable_segments: int,
) -> int:
    """Check a PutStart/Upsert request.

    Returns:
        The replica count to allocate.

    Raises:
        InvalidArgumentError: bad key, client id, size, replica_num or pin options.
        CapacityError: NO_AVAILABLE_SEGMENT, fewer usable segments than replicas.
    """
    check_key(key, config.max_key_length)
    check_name("client_id", client_id)
    if not isinstance(size, int) or size <= 0:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"object size must be positive, got {size!r}"
        )
    if size > config.max_object_size:
        raise InvalidArgumentError(
            ErrorCode.OBJECT_TOO_LARGE,
            f"object of {size} bytes exceeds max_object_size {config.max_object_size}",
        )
    n = config.default_replica_num if cfg.replica_num is None else cfg.replica_num
    if not 1 <= n <= MAX_REPLICA_NUM:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"replica_num must be in 1..{MAX_REPLICA_NUM}, got {n}"
        )
    if cfg.soft_pin and cfg.hard_pin:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, "soft_pin and hard_pin are exclusive; choose one"
        )
    if cfg.soft_pin:
        pin_expiry(config, False, cfg.soft_pin_ttl_s, 0.0)
    if n > usable_segments:
        raise CapacityError(
            ErrorCode.NO_AVAILABLE_SEGMENT,
            f"replica_num {n} needs {n} distinct segments; {usable_segments} usable",
        )
    return n


def each(items: Sequence[I], fn: Callable[[I], T]) -> list[T | StoreError]:
    """Apply ``fn`` to every item; a StoreError becomes that item's result (batch calls)."""
    out: list[T | StoreError] = []
    for item in items:
        try:
            out.append(fn(item))
        except StoreError as exc:
            out.append(exc)
    return out
