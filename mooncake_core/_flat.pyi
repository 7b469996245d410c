"""Types of the C extension ``mooncake_core._flat`` (``native/mc_flat.c``)."""

from typing import Any

MAX_DEPTH: int

def pack(obj: Any, /) -> bytes:
    """None, bool, int, float, str, tuple and list values (and their subclasses), encoded."""

def unpack(data: bytes | bytearray | memoryview, /) -> Any:
    """The inverse of :func:`pack`; ``ValueError`` names the first problem of bad input."""

RING_HEAD: int
RING_COUNT: int
RING_TAIL: int
RING_DONE: int
RING_SIZE: int
RING_SOFT: int
RING_DATA: int

def ring_push(ring: Any, kind: int, obj: Any, /) -> int:
    """``obj`` packed into the shared ring; its sequence number, or 0 when full."""

def ring_read(ring: Any, pos: int, /) -> tuple[int, bytes, int] | None:
    """``(kind, payload, next position)`` of the record at ``pos``; ``None`` at the head."""

def ring_get(ring: Any, field: int, /) -> int:
    """A header field (``RING_*``), loaded with acquire ordering."""

def ring_set(ring: Any, field: int, value: int, /, *more: int) -> None:
    """Store header words (``field, value`` pairs, in order) with release ordering."""
