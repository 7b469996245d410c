"""Number formatting shared by the TUI and ``--once`` (fixed widths, readable at 80x24)."""

from __future__ import annotations

import time

__all__ = [
    "ago",
    "bar",
    "duration",
    "gbps",
    "human_bytes",
    "pct",
    "rate",
    "seconds",
    "signed_seconds",
    "spark",
]

_BLOCKS = "▁▂▃▄▅▆▇█"


def human_bytes(n: float | None) -> str:
    """``1.5G``-style size (binary units)."""
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"  # pragma: no cover - loop always returns


def gbps(bps: float | None) -> str:
    """Bytes per second in decimal units picked for the value (``980K``, ``4.70M``,
    ``12.3G``; like NIC specs, 1G = 1e9 B): at most 5 characters, three significant
    digits, so a trickle under 1 MB/s still reads as what it is; ``-`` when unknown."""
    if bps is None:
        return "-"
    v = float(bps)
    if v < 999.5:
        return f"{v:.0f}"
    for unit in ("K", "M", "G", "T"):
        v /= 1000
        if v < 999.5 or unit == "T":
            break
    digits = 2 if v < 9.995 else 1 if v < 99.95 else 0
    return f"{v:.{digits}f}{unit}"


def rate(per_s: float | None) -> str:
    """A per-second figure with one decimal; ``-`` when unknown."""
    return "-" if per_s is None else f"{per_s:.1f}"


def pct(x: float | None) -> str:
    """A ratio as a percentage; ``-`` when unknown."""
    return "-" if x is None else f"{100 * x:.0f}%"


def seconds(s: float | None) -> str:
    """A latency: ms under one second, else seconds."""
    if s is None:
        return "-"
    return f"{s * 1000:.0f}ms" if abs(s) < 1 else f"{s:.2f}s"


def signed_seconds(s: float | None) -> str:
    """A signed difference like :func:`seconds`, sign always shown (``+17ms``)."""
    if s is None:
        return "-"
    return ("+" if s >= 0 else "-") + seconds(abs(s))


def duration(s: float | None) -> str:
    """An uptime: ``3d04h``, ``5h07m``, ``12m03s``, ``42s``."""
    if s is None:
        return "-"
    s = int(s)
    d, h, m = s // 86400, s // 3600 % 24, s // 60 % 60
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s % 60:02d}s"
    return f"{s}s"


def ago(t: float | None, now: float | None = None) -> str:
    """How long ago wall time ``t`` was (``never`` for None)."""
    if t is None:
        return "never"
    now = time.time() if now is None else now
    return duration(max(0.0, now - t)) + " ago"


def bar(ratio: float, width: int) -> str:
    """A text gauge ``█████░░░░░`` of ``width`` cells."""
    full = max(0, min(width, round(ratio * width)))
    return "█" * full + "░" * (width - full)


def spark(values: tuple[float, ...], width: int) -> str:
    """A one-line block sparkline of the last ``width`` values (scaled to their max)."""
    vals = values[-width:]
    if not vals:
        return " " * width
    top = max(vals)
    if top <= 0:
        return (_BLOCKS[0] * len(vals)).rjust(width)
    chars = [_BLOCKS[min(7, int(v / top * 7.999))] for v in vals]
    return "".join(chars).rjust(width)


def bytes_per_s(bps: float | None) -> str:
    """A rate with its unit, ``42.5MB/s`` (decimal, as :func:`gbps`); ``-`` when unknown."""
    return "-" if bps is None else f"{gbps(bps)}B/s"
