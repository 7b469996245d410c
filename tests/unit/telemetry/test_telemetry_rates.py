"""Sliding-window rates with explicit time."""

from __future__ import annotations

import pytest

from mooncake_core.telemetry import RateBook, RateWindow


def test_needs_two_samples():
    w = RateWindow(10.0)
    assert w.rate() is None
    w.add(100.0, 50)
    assert w.rate() is None
    w.add(102.0, 250)
    assert w.rate() == 100.0


def test_old_samples_leave_the_window_but_one_baseline_stays():
    w = RateWindow(10.0)
    for t, v in [(0, 0), (5, 500), (10, 1000), (20, 1000), (21, 1100)]:
        w.add(float(t), v)
    # Window is (11, 21]: baseline is the newest sample at or before 11, i.e. t=10.
    assert w.rate() == pytest.approx(100 / 11)
    assert len(w) == 3


def test_idle_counter_rate_is_zero():
    w = RateWindow(5.0)
    w.add(0.0, 7)
    w.add(1.0, 7)
    assert w.rate() == 0.0


def test_counter_reset_drops_history_instead_of_negative_rate():
    w = RateWindow(10.0)
    w.add(0.0, 1000)
    w.add(1.0, 2000)
    w.add(2.0, 10)  # process restarted
    assert w.rate() is None
    w.add(3.0, 110)
    assert w.rate() == 100.0


def test_same_instant_gives_no_rate():
    w = RateWindow(10.0)
    w.add(1.0, 1)
    w.add(1.0, 5)
    assert w.rate() is None


def test_time_going_back_is_refused_and_state_kept():
    w = RateWindow(10.0)
    w.add(5.0, 10)
    w.add(6.0, 20)
    with pytest.raises(ValueError, match="before the previous"):
        w.add(4.0, 30)
    assert w.rate() == 10.0


def test_bad_window_rejected():
    with pytest.raises(ValueError, match="window_s"):
        RateWindow(0)


def test_ratebook_keys_and_forget():
    b = RateBook(10.0)
    b.add(("a", "nic", "tx"), 0.0, 0)
    assert b.add(("a", "nic", "tx"), 2.0, 4) == 2.0
    b.add(("b", "nic", "tx"), 0.0, 0)
    b.add(("b", "nic", "tx"), 1.0, 9)
    b.forget(("a",))
    assert b.rate(("a", "nic", "tx")) is None
    assert b.rate(("b", "nic", "tx")) == 9.0
