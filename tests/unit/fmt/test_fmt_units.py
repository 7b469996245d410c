"""The one formatting module (``mooncake_core.fmt``): exact strings at the edges."""

from __future__ import annotations

from mooncake_core.fmt import (
    ago,
    byte_rate,
    duration,
    pct,
    per_s,
    seconds,
    si,
    signed_seconds,
    size,
)


def test_size_binary_units_and_boundaries() -> None:
    assert [size(n) for n in (None, 0, 1, 999, 1000, 1023, 1024, 1536)] == [
        "-", "0 B", "1 B", "999 B", "1000 B", "1023 B", "1.0 KiB", "1.5 KiB",
    ]  # fmt: skip
    # The unit is the one whose rounded value stays under 1024: never "1024 KiB".
    assert size(1023.5) == "1.0 KiB" and size((1 << 20) - 1) == "1.0 MiB"
    assert size((1 << 20) - 600) == "1023 KiB" and size((1 << 20) - 500) == "1.0 MiB"
    # One decimal under 100 of the unit, none from 100: at most 7 characters compact.
    assert [size(x * 1024) for x in (99.94, 99.95, 150, 512.4)] == [
        "99.9 KiB", "100 KiB", "150 KiB", "512 KiB",
    ]  # fmt: skip
    assert [size(1 << k) for k in (20, 30, 40, 50, 60)] == [
        "1.0 MiB", "1.0 GiB", "1.0 TiB", "1.0 PiB", "1.0 EiB",
    ]  # fmt: skip
    assert size(1 << 70) == "1024 EiB"  # huge: the last unit grows
    assert size(16 << 20, compact=True) == "16.0MiB" and size(512, compact=True) == "512B"
    assert max(len(size(1023.4 * 1024**k, compact=True)) for k in range(7)) == 7
    assert size(-1536) == "-1.5 KiB" and size(None, missing="?") == "?"
    # Ties round away from zero, as JavaScript's toFixed (1.25 KiB is exact in binary).
    assert size(1280) == "1.3 KiB" and size(1.5) == "2 B"


def test_si_and_byte_rate_three_significant_digits() -> None:
    assert [si(x) for x in (None, 0, 999, 999.4, 999.5, 1000, 47_400, 980_000, 4.7e6)] == [
        "-", "0", "999", "999", "1.00K", "1.00K", "47.4K", "980K", "4.70M",
    ]  # fmt: skip
    assert [si(x) for x in (2e9, 12.34e9, 999.6e9, 9.994e3, 9.995e3, 99.95e3)] == [
        "2.00G", "12.3G", "1.00T", "9.99K", "10.0K", "100K",
    ]  # fmt: skip
    assert max(len(si(10**k * 9.996)) for k in range(18)) <= 5
    assert si(1e21) == "1000E" and si(-4.7e6) == "-4.70M"
    assert [byte_rate(x) for x in (None, 0, 512, 980_000, 4.7e6)] == [
        "-", "0 B/s", "512 B/s", "980 KB/s", "4.70 MB/s",
    ]  # fmt: skip
    assert byte_rate(12.34e9, compact=True) == "12.3GB/s"


def test_seconds_ms_under_a_tenth() -> None:
    assert [seconds(x) for x in (None, 0, 0.0004, 0.0451, 0.0994, 0.0995, 0.1, 1.234)] == [
        "-", "0 ms", "0 ms", "45 ms", "99 ms", "0.10 s", "0.10 s", "1.23 s",
    ]  # fmt: skip
    assert seconds(-0.05) == "-50 ms" and seconds(-0.0004) == "0 ms"  # never "-0 ms"
    assert seconds(-2.5) == "-2.50 s" and seconds(86400.0) == "86400 s"
    # Three significant digits, switching on the rounded value (9.996 s is 10.0 s).
    assert [seconds(x, compact=True) for x in (9.994, 9.996, 12.34, 99.94, 99.96, 123.4)] == [
        "9.99s",
        "10.0s",
        "12.3s",
        "99.9s",
        "100s",
        "123s",
    ]
    assert seconds(0.25, compact=True) == "0.25s" and seconds(0.017, compact=True) == "17ms"
    assert [signed_seconds(x) for x in (None, 0.0, 0.017, -0.017, 0.3, -1.5)] == [
        "-", "+0 ms", "+17 ms", "-17 ms", "+0.30 s", "-1.50 s",
    ]  # fmt: skip
    assert signed_seconds(-0.017, compact=True) == "-17ms"


def test_duration_and_ago() -> None:
    assert [duration(x) for x in (None, 0, 0.9, 42, 59.99, 60, 185, 3600, 7620, 86399)] == [
        "-", "0s", "0s", "42s", "59s", "1m00s", "3m05s", "1h00m", "2h07m", "23h59m",
    ]  # fmt: skip
    assert duration(90000) == "1d01h" and duration(1e9) == "11574d01h"
    assert duration(-185) == "-3m05s" and duration(-0.5) == "0s"
    assert ago(None) == "never" and ago(100.0, 285.0) == "3m05s ago"
    assert ago(300.0, 285.0) == "0s ago"  # clock skew: not "-15s ago"


def test_pct_and_per_s() -> None:
    assert [pct(x) for x in (None, 0, 0.291, 0.995, 1, 12.5)] == [
        "-", "0%", "29%", "100%", "100%", "1250%",
    ]  # fmt: skip
    assert pct(0.2914, 1) == "29.1%" and pct(None, missing="?") == "?"
    assert per_s(None) == "-" and per_s(2.25) == "2.3" and per_s(0.125, 2) == "0.13"
