"""Types of the C extension ``mooncake_core._flat`` (``native/mc_flat.c``)."""

from typing import Any

MAX_DEPTH: int

def pack(obj: Any, /) -> bytes:
    """None, bool, int, float, str, tuple and list values (and their subclasses), encoded."""

def unpack(data: bytes | bytearray | memoryview, /) -> Any:
    """The inverse of :func:`pack`; ``ValueError`` names the first problem of bad input."""
