"""Turn snapshots (frozen dataclasses, enums, tuples) into plain JSON values."""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from typing import Any

__all__ = ["to_plain"]


def to_plain(value: Any) -> Any:
    """Convert ``value`` into JSON-ready dicts, lists, strings and numbers.

    Dataclasses become dicts (slots dataclasses included), enums their *name* (operators
    read names, not numbers), tuples and sets lists, mappings dicts with string keys.
    Non-finite floats become ``None`` because JSON has no NaN.

    Args:
        value: A snapshot or any nesting of the types above.

    Returns:
        The plain value.

    Raises:
        TypeError: A value of a type that has no JSON form (names the type).
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(to_plain(v) for v in value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot serialise {type(value).__name__} value {value!r} to JSON")
