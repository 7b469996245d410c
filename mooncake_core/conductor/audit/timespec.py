"""Parse the times operators type: ``10m`` ago, ``2026-11-29T09:00``, bucket ``1m``."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``90``, ``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``500ms``.

    Raises:
        ValueError: not a positive duration.
    """
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 10m, 2h, 1d)")
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if value <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return value


def parse_when(text: str, now: float) -> float:
    """Unix time for ``text``: ``now``, a duration ago (``10m``), or an ISO 8601 time.

    ISO times without a zone are taken as UTC (the CLI prints UTC too).

    Args:
        text: What the operator typed.
        now: Current unix time, for relative values.

    Raises:
        ValueError: neither a duration nor an ISO time.
    """
    t = text.strip()
    if t == "now":
        return now
    if _DURATION.match(t):
        return now - parse_duration(t)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use ISO 8601 like 2026-11-29T09:00:00, or 10m for 10 minutes ago)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def format_time(ts: float) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2026-11-29T09:00:00.123Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
