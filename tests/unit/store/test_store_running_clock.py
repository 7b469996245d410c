"""RunningClock: the master's clock skips its own stalls and clock jumps."""

from __future__ import annotations

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.master import MasterState
from mooncake_core.store.running_clock import RunningClock


class Raw:
    """A hand-driven monotonic clock."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_follows_the_raw_clock_in_small_steps() -> None:
    raw = Raw()
    clock = RunningClock(raw, 1.0)
    seen = []
    for _ in range(5):
        raw.t += 0.25
        seen.append(clock())
    assert seen == [100.25, 100.5, 100.75, 101.0, 101.25]
    assert (clock.stalls, clock.skipped_s) == (0, 0.0)


def test_a_stall_or_forward_jump_counts_one_step() -> None:
    raw = Raw()
    stalls: list[tuple[float, float]] = []
    clock = RunningClock(raw, 1.0, lambda gap, counted: stalls.append((gap, counted)))
    raw.t += 15.0  # SIGSTOP for 15 s, or the clock stepped forward
    assert clock() == 101.0
    raw.t += 0.5
    assert clock() == 101.5
    assert stalls == [(15.0, 1.0)]
    assert (clock.stalls, clock.skipped_s) == (1, 14.0)


def test_a_backward_jump_counts_nothing() -> None:
    raw = Raw()
    stalls: list[tuple[float, float]] = []
    clock = RunningClock(raw, 1.0, lambda gap, counted: stalls.append((gap, counted)))
    raw.t -= 30.0
    assert clock() == 100.0
    raw.t += 0.5
    assert clock() == 100.5
    assert stalls == [(-30.0, 0.0)]


def test_max_step_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_step_s"):
        RunningClock(Raw(), 0.0)


def test_master_on_a_running_clock_keeps_nodes_over_a_pause_and_expires_dead_ones() -> None:
    # The master's upkeep reads the clock every tick; heartbeats every 0.5 s. A 20 s
    # pause then resumes: nobody is expired. Then c2 really goes silent: expired once
    # client_ttl_s of *running* time has passed without it.
    raw = Raw(0.0)
    clock = RunningClock(raw, 0.5)
    m = MasterState(MasterConfig(client_ttl_s=2.0, heartbeat_interval_s=0.5, unmount_grace_s=0))
    m.mount_segment("a", "c1", 1000, clock())
    m.mount_segment("b", "c2", 1000, clock())

    def run(seconds: float, beating: tuple[str, ...]) -> list[str]:
        expired: list[str] = []
        for i in range(round(seconds / 0.1)):
            raw.t += 0.1
            now = clock()
            if i % 5 == 4:
                for c in beating:
                    m.heartbeat(c, now)
            expired += m.expire_clients(now)
        return expired

    assert run(3.0, ("c1", "c2")) == []
    raw.t += 20.0  # the master is stopped; the nodes' heartbeats queue up
    now = clock()
    assert m.expire_clients(now) == []  # the first tick after the pause
    assert run(3.0, ("c1", "c2")) == []
    assert run(1.8, ("c1",)) == []  # c2 silent for less than client_ttl_s
    assert run(0.5, ("c1",)) == ["c2"]
    assert [s.name for s in m.snapshot().segments] == ["a"]
