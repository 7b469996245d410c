"""Operator time syntax: durations, relative and ISO times."""

from __future__ import annotations

import pytest

from mooncake_core.conductor.audit import format_time, parse_duration, parse_when


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("30s", 30.0),
        ("10m", 600.0),
        ("1.5h", 5400.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("500ms", 0.5),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "abc", "-5m", "10 minutes", "0s"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")):
        parse_duration(bad)


def test_parse_when_relative_iso_and_now() -> None:
    assert parse_when("10m", now=10_000.0) == 9_400.0
    assert parse_when("now", now=10_000.0) == 10_000.0
    assert parse_when("2027-01-15T08:00:00", now=0) == 1_800_000_000.0  # naive = UTC
    assert parse_when("2027-01-15T09:00:00+01:00", now=0) == 1_800_000_000.0
    assert parse_when("2027-01-15T08:00:00Z", now=0) == 1_800_000_000.0
    with pytest.raises(ValueError, match="not a time: 'yesterday'"):
        parse_when("yesterday", now=0)


def test_format_time_is_utc_millis() -> None:
    assert format_time(1_800_000_000.25) == "2027-01-15T08:00:00.250Z"
