"""Store errors: one exception type per family, each carrying a stable error code.

The codes travel over gRPC unchanged (``ErrorCode`` in ``store.proto`` mirrors
:class:`ErrorCode`), so a client raises the same exception the master core raised.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Stable error codes; values are part of the wire protocol (never renumber)."""

    OK = 0
    OBJECT_NOT_FOUND = 1
    OBJECT_ALREADY_EXISTS = 2
    OBJECT_NOT_READY = 3
    OBJECT_LEASED = 4
    INVALID_KEY = 5
    INVALID_PARAMS = 6
    OBJECT_TOO_LARGE = 7
    NO_AVAILABLE_SEGMENT = 8
    STORE_FULL = 9
    SEGMENT_NOT_FOUND = 10
    SEGMENT_ALREADY_EXISTS = 11
    INVALID_STATE = 12
    PIN_NOT_FOUND = 13
    UNAVAILABLE = 14
    INTERNAL = 15
    UNAUTHENTICATED = 16
    STALE = 17
    """SSD tier: a confirmation names an object version (token) that is gone."""


class StoreError(Exception):
    """Base of every store error.

    Attributes:
        code: the stable :class:`ErrorCode`.
        message: human-readable text naming the bad value.
    """

    default_code = ErrorCode.INTERNAL

    def __init__(self, code: ErrorCode | None, message: str) -> None:
        self.code = ErrorCode(code if code is not None else self.default_code)
        self.message = message
        super().__init__(f"{self.code.name}: {message}")

    def __reduce__(self) -> tuple[object, tuple[int, str]]:
        return (error_from_code, (int(self.code), self.message))


class NotFoundError(StoreError):
    """An object, segment or pin that does not exist."""

    default_code = ErrorCode.OBJECT_NOT_FOUND


class ConflictError(StoreError):
    """The request conflicts with current state (exists, leased, not ready, wrong state)."""

    default_code = ErrorCode.INVALID_STATE


class InvalidArgumentError(StoreError):
    """The request itself is malformed (bad key, size, params, regex)."""

    default_code = ErrorCode.INVALID_PARAMS


class CapacityError(StoreError):
    """Not enough segments or space, even after eviction."""

    default_code = ErrorCode.STORE_FULL


class UnavailableError(StoreError):
    """The master could not be reached or refused the call (transport level)."""

    default_code = ErrorCode.UNAVAILABLE


class AuthError(StoreError):
    """The master refused the call: missing or wrong cluster token."""

    default_code = ErrorCode.UNAUTHENTICATED


_FAMILY: dict[ErrorCode, type[StoreError]] = {
    ErrorCode.OBJECT_NOT_FOUND: NotFoundError,
    ErrorCode.SEGMENT_NOT_FOUND: NotFoundError,
    ErrorCode.PIN_NOT_FOUND: NotFoundError,
    ErrorCode.OBJECT_ALREADY_EXISTS: ConflictError,
    ErrorCode.OBJECT_NOT_READY: ConflictError,
    ErrorCode.OBJECT_LEASED: ConflictError,
    ErrorCode.SEGMENT_ALREADY_EXISTS: ConflictError,
    ErrorCode.INVALID_STATE: ConflictError,
    ErrorCode.STALE: ConflictError,
    ErrorCode.INVALID_KEY: InvalidArgumentError,
    ErrorCode.INVALID_PARAMS: InvalidArgumentError,
    ErrorCode.OBJECT_TOO_LARGE: InvalidArgumentError,
    ErrorCode.NO_AVAILABLE_SEGMENT: CapacityError,
    ErrorCode.STORE_FULL: CapacityError,
    ErrorCode.UNAVAILABLE: UnavailableError,
    ErrorCode.UNAUTHENTICATED: AuthError,
}


def error_from_code(code: int, message: str) -> StoreError:
    """Build the exception of the right family for ``code``.

    Args:
        code: an :class:`ErrorCode` value (unknown values map to ``INTERNAL``).
        message: the error text.

    Returns:
        A :class:`StoreError` subclass instance (not raised).
    """
    try:
        ec = ErrorCode(code)
    except ValueError:
        return StoreError(ErrorCode.INTERNAL, f"unknown error code {code}: {message}")
    return _FAMILY.get(ec, StoreError)(ec, message)
