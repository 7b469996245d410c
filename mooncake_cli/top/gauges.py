"""Text gauges of the TUI and ``--once``: a usage bar and a sparkline. Numbers are
formatted by :mod:`mooncake_core.fmt`, the same rules as the CLI and the dashboard."""

from __future__ import annotations

__all__ = ["bar", "spark"]

_BLOCKS = "▁▂▃▄▅▆▇█"


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
