"""NIC pause/backoff state machine with explicit time."""

from __future__ import annotations

import pytest

from mooncake_core.transfer.health import NicHealth


def test_pause_after_threshold_then_probe_and_backoff():
    h = NicHealth(threshold=2, pause_s=1.0, pause_max_s=4.0)
    assert h.record_failure("n", 0.0) is False
    assert h.available("n", 0.05)
    assert h.record_failure("n", 0.1) is True
    assert not h.available("n", 0.5)
    assert h.state("n", 0.5).paused and h.state("n", 0.5).paused_until == pytest.approx(1.1)
    assert h.available("n", 1.2)  # pause over: probing
    assert h.record_failure("n", 1.3) is True  # a failed probe re-pauses at once, doubled
    assert h.state("n", 1.3).paused_until == pytest.approx(3.3)
    assert h.available("n", 3.4)
    assert h.record_failure("n", 3.5) is True
    assert h.state("n", 3.5).paused_until == pytest.approx(7.5)  # 4 s: the cap
    assert h.available("n", 7.6)
    assert h.record_failure("n", 7.7) is True
    assert h.state("n", 7.7).paused_until == pytest.approx(11.7)  # stays capped
    assert h.available("n", 11.8)
    h.record_success("n", 11.9)
    s = h.state("n", 11.9)
    assert (s.paused, s.consecutive_failures, s.next_pause_s) == (False, 0, 1.0)
    assert h.record_failure("n", 12.0) is False  # back to needing the threshold


def test_late_failure_during_pause_is_ignored():
    h = NicHealth(threshold=1, pause_s=2.0, pause_max_s=8.0)
    assert h.record_failure("n", 0.0) is True
    assert h.record_failure("n", 1.0) is False  # a slice sent before the pause
    assert h.state("n", 1.0).paused_until == pytest.approx(2.0)


def test_success_resets_consecutive_count_and_nics_are_independent():
    h = NicHealth(threshold=2, pause_s=1.0, pause_max_s=1.0)
    h.record_failure("a", 0.0)
    h.record_success("a", 0.1)
    assert h.record_failure("a", 0.2) is False
    assert h.record_failure("b", 0.2) is False
    assert h.record_failure("b", 0.3) is True
    assert h.available("a", 0.4) and not h.available("b", 0.4)
    assert sorted(h.known()) == ["a", "b"]
    assert not h.state("unknown", 0).paused


def test_bad_parameters():
    with pytest.raises(ValueError, match="threshold"):
        NicHealth(0, 1, 2)
    with pytest.raises(ValueError, match="pause"):
        NicHealth(1, 3, 2)
