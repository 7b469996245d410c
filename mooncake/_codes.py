"""Upstream's integer return codes (``mooncake-store/include/types.h``) for our errors.

Upstream's Python binding never raises for a store failure: calls return ``0`` or a
negative ``ErrorCode``. The adapter catches :class:`StoreError` at the edge and returns
the code upstream would have returned for the same situation.
"""

from __future__ import annotations

from enum import IntEnum

from mooncake_core.store.errors import ErrorCode, StoreError


class UpstreamCode(IntEnum):
    """The subset of upstream's ``ErrorCode`` values this adapter returns."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    NO_AVAILABLE_HANDLE = -200
    INVALID_KEY = -400
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    TRANSFER_FAIL = -800
    RPC_FAIL = -900
    NOT_SUPPORTED = -1012


_MAP: dict[ErrorCode, UpstreamCode] = {
    ErrorCode.OBJECT_NOT_FOUND: UpstreamCode.OBJECT_NOT_FOUND,
    ErrorCode.OBJECT_ALREADY_EXISTS: UpstreamCode.OBJECT_ALREADY_EXISTS,
    ErrorCode.OBJECT_NOT_READY: UpstreamCode.REPLICA_IS_NOT_READY,
    ErrorCode.OBJECT_LEASED: UpstreamCode.OBJECT_HAS_LEASE,
    ErrorCode.INVALID_KEY: UpstreamCode.INVALID_KEY,
    ErrorCode.INVALID_PARAMS: UpstreamCode.INVALID_PARAMS,
    ErrorCode.OBJECT_TOO_LARGE: UpstreamCode.INVALID_PARAMS,
    ErrorCode.NO_AVAILABLE_SEGMENT: UpstreamCode.NO_AVAILABLE_HANDLE,
    ErrorCode.STORE_FULL: UpstreamCode.NO_AVAILABLE_HANDLE,
    ErrorCode.SEGMENT_NOT_FOUND: UpstreamCode.SEGMENT_NOT_FOUND,
    ErrorCode.SEGMENT_ALREADY_EXISTS: UpstreamCode.SEGMENT_ALREADY_EXISTS,
    ErrorCode.INVALID_STATE: UpstreamCode.INTERNAL_ERROR,
    ErrorCode.PIN_NOT_FOUND: UpstreamCode.OBJECT_NOT_FOUND,
    ErrorCode.INTERNAL: UpstreamCode.INTERNAL_ERROR,
    ErrorCode.UNAUTHENTICATED: UpstreamCode.ILLEGAL_CLIENT,
    ErrorCode.STALE: UpstreamCode.INTERNAL_ERROR,
}


def to_code(exc: StoreError) -> int:
    """Upstream's code for ``exc``.

    ``UNAVAILABLE`` splits the way upstream's does: a failed data transfer (a replica
    could not be written or read) is ``TRANSFER_FAIL``; anything else (master
    unreachable, not set up) is ``RPC_FAIL``.
    """
    if exc.code == ErrorCode.UNAVAILABLE:
        if "replica" in exc.message:
            return int(UpstreamCode.TRANSFER_FAIL)
        return int(UpstreamCode.RPC_FAIL)
    return int(_MAP.get(exc.code, UpstreamCode.INTERNAL_ERROR))
