"""Upstream's size and duration strings ("16MB", "1.5 GB", "500ms", "5s")."""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20}
_UNITS |= {"G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40}
_NUM = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_DURATION = {"": 1.0, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def parse_size(value: object) -> int | None:
    """Bytes in ``value`` (an int, or upstream's ``try_string_to_byte_size`` syntax:
    a number with an optional B/K/KB/M/MB/G/GB/T/TB unit, binary multiples); ``None``
    when it is not a size ("50%", "-1", "lots")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    m = _NUM.match(str(value))
    if m is None:
        return None
    mult = _UNITS.get(m.group(2).upper())
    return None if mult is None else int(float(m.group(1)) * mult)


def parse_duration_ms(value: str) -> float | None:
    """Milliseconds in upstream's duration flags ("500", "500ms", "5s", "1m", "1h")."""
    m = re.match(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m|h|)\s*$", value)
    if m is None:
        return None
    return float(m.group(1)) * _DURATION[m.group(2)]
