"""Numbers for people: sizes, byte rates, latencies, durations, ages, ratios.

One set of rules for every surface: the CLI, ``mooncake top`` and the dashboard (its
client-side twin, ``mooncake_web/static/js/fmt.js``, follows the same rules and is tested
against the same table of values). A unit word means one thing everywhere:

======================  ==================================================================
size                    binary: ``B KiB MiB GiB TiB PiB EiB`` (1 KiB = 1024 B), one
                        decimal under 100 of the unit: ``512 B``, ``16.0 MiB``, ``512 MiB``
byte rate               decimal, like NIC speeds (1 KB/s = 1000 B/s), three significant
                        digits in the unit the value needs: ``980 KB/s``, ``4.70 MB/s``,
                        ``12.3 GB/s``; :func:`si` is the bare number (``4.70M``) for a
                        column whose header names the unit
latency (``seconds``)   ``ms`` without decimals under 0.1 s (``45 ms``), else seconds with
                        two decimals (``1.20 s``)
duration, age           two units: ``3d04h``, ``5h07m``, ``12m03s``, ``42s``; an age is
                        ``12m03s ago``
ratio                   percent: ``29%`` (``digits`` more if asked)
======================  ==================================================================

``compact=True`` drops the space between number and unit (``16.0MiB``, ``45ms``) for
fixed-width table cells. An unknown value (``None``) prints as ``missing`` (``-``).
Rounding is half away from zero on the exact binary value, which is what JavaScript's
``toFixed`` does, so both sides print the same digits (Python's own ``format`` rounds
half to even).
"""

from __future__ import annotations

import time
from decimal import ROUND_HALF_UP, Decimal

__all__ = [
    "ago",
    "byte_rate",
    "duration",
    "pct",
    "per_s",
    "seconds",
    "si",
    "signed_seconds",
    "size",
]

_SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_SI_UNITS = ("K", "M", "G", "T", "P", "E")


def _fixed(x: float, digits: int) -> str:
    """``x`` with ``digits`` decimals, ties away from zero (as JavaScript ``toFixed``);
    never ``-0``."""
    d = Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    text = format(d, "f")
    return text[1:] if text.startswith("-") and not d else text


def _join(number: str, unit: str, compact: bool) -> str:
    return f"{number}{unit}" if compact else f"{number} {unit}"


def size(n: float | None, *, compact: bool = False, missing: str = "-") -> str:
    """A size in binary units: ``512 B``, ``1.0 KiB``, ``16.0 MiB``, ``512 MiB``
    (``16.0MiB`` compact): one decimal under 100, none from 100 (three or four
    significant digits, at most 7 characters compact up to 1023 EiB).

    The unit is the largest whose rounded value stays under 1024, so 1048575 B is
    ``1.0 MiB``, never ``1024 KiB``.
    """
    if n is None:
        return missing
    v = float(n)
    if abs(float(_fixed(v, 0))) < 1024:
        return _join(_fixed(v, 0), "B", compact)
    for unit in _SIZE_UNITS:
        v /= 1024
        if abs(float(_fixed(v, 0))) < 1024 or unit == _SIZE_UNITS[-1]:
            break
    return _join(_fixed(v, 1 if abs(v) < 99.95 else 0), unit, compact)


def si(v: float | None, *, missing: str = "-") -> str:
    """A quantity in decimal units picked for the value, three significant digits, at most
    five characters up to 999P: ``999``, ``1.00K``, ``980K``, ``4.70M``, ``12.3G``."""
    if v is None:
        return missing
    x = float(v)
    if abs(x) < 999.5:
        return _fixed(x, 0)
    for unit in _SI_UNITS:
        x /= 1000
        if abs(x) < 999.5 or unit == _SI_UNITS[-1]:
            break
    a = abs(x)
    digits = 2 if a < 9.995 else 1 if a < 99.95 else 0
    return _fixed(x, digits) + unit


def byte_rate(bps: float | None, *, compact: bool = False, missing: str = "-") -> str:
    """Bytes per second in decimal units: ``0 B/s``, ``980 KB/s``, ``4.70 MB/s``."""
    if bps is None:
        return missing
    number = si(bps)
    if number[-1].isdigit():
        return _join(number, "B/s", compact)
    return _join(number[:-1], number[-1] + "B/s", compact)


def seconds(s: float | None, *, compact: bool = False, missing: str = "-") -> str:
    """A latency: ``45 ms`` under 0.1 s (as rounded), else three significant digits
    (``1.20 s``, ``12.3 s``, ``123 s``; whole seconds from 100 s)."""
    if s is None:
        return missing
    ms = _fixed(s * 1000, 0)
    if abs(float(ms)) < 100:
        return _join(ms, "ms", compact)
    for digits in (2, 1):
        text = _fixed(s, digits)
        if abs(float(text)) < 10 ** (3 - digits):  # as rounded: 9.996 is 10.0, not 10.00
            return _join(text, "s", compact)
    return _join(_fixed(s, 0), "s", compact)


def signed_seconds(s: float | None, *, compact: bool = False, missing: str = "-") -> str:
    """A signed difference like :func:`seconds`, sign always shown (``+17 ms``,
    ``-1.50 s``): prediction errors and the bias."""
    if s is None:
        return missing
    return ("+" if s >= 0 else "-") + seconds(abs(s), compact=compact)


def duration(s: float | None, *, missing: str = "-") -> str:
    """An uptime or age, whole seconds, two units: ``3d04h``, ``5h07m``, ``12m03s``,
    ``42s``; negative with a leading ``-``."""
    if s is None:
        return missing
    t = int(s)  # toward zero: -0.5 s is "0s"
    if t < 0:
        return "-" + duration(-t)
    d, h, m = t // 86400, t // 3600 % 24, t // 60 % 60
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{t % 60:02d}s"
    return f"{t}s"


def ago(t: float | None, now: float | None = None, *, missing: str = "never") -> str:
    """How long ago wall time ``t`` was: ``12m03s ago`` (a ``t`` in the future, clock
    skew, reads ``0s ago``); ``never`` for None."""
    if t is None:
        return missing
    now = time.time() if now is None else now
    return duration(max(0.0, now - t)) + " ago"


def pct(x: float | None, digits: int = 0, *, missing: str = "-") -> str:
    """A ratio as a percentage: ``29%`` (``29.1%`` with ``digits=1``)."""
    return missing if x is None else _fixed(100 * x, digits) + "%"


def per_s(x: float | None, digits: int = 1, *, missing: str = "-") -> str:
    """A count per second (decisions, requests) with ``digits`` decimals."""
    return missing if x is None else _fixed(x, digits)
