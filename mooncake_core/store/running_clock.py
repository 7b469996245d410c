"""The master's running clock: time that passed while the master itself was running.

Every timer of the master's core (client liveness, leases, put timeouts, pins) reads
``now`` from this clock. It follows the monotonic clock, except that one reading never
moves it more than ``max_step_s`` past the previous reading, and never backwards::

    monotonic  0 ── 1 ── 2 ─────────── paused 15 s ─────────── 17 ── 18
    running    0 ── 1 ── 2 ── +max_step_s ──────────────────── 3  ── 4    (max_step_s = 1)

The master reads its clock at least every upkeep tick (0.1 s), so a gap much larger than
that between two readings means the master was not running: stopped (SIGSTOP, a VM
pause), starved of CPU, or its clock jumped (an NTP step, a resumed VM). Counting such a
gap in full would make every node look silent for the whole gap and expire healthy nodes
with their data. Counting at most ``max_step_s`` of it gives every node a fresh grace
period after a stall: it is expired only for silence measured while the master ran.

Sans-IO: the underlying clock is injected; tests drive it by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class RunningClock:
    """A clock that skips the master's own stalls and clock jumps.

    Args:
        raw: the underlying clock (``time.monotonic`` in the master).
        max_step_s: most seconds one reading may advance the clock; larger gaps are
            stalls (positive).
        on_stall: called with ``(gap_s, counted_s)`` when a reading finds a stall or a
            backward jump (``gap_s`` negative), outside the clock's lock.
    """

    def __init__(
        self,
        raw: Callable[[], float],
        max_step_s: float,
        on_stall: Callable[[float, float], None] | None = None,
    ) -> None:
        if not max_step_s > 0:
            raise ValueError(f"max_step_s must be > 0, got {max_step_s!r}")
        self._raw = raw
        self.max_step_s = max_step_s
        self._on_stall = on_stall
        self._lock = threading.Lock()
        self._last_raw = raw()
        self._now = self._last_raw
        self.stalls = 0
        """Stalls and backward jumps seen."""
        self.skipped_s = 0.0
        """Seconds of the underlying clock not counted (stalls beyond ``max_step_s``)."""

    def __call__(self) -> float:
        """The running time now, in seconds."""
        with self._lock:
            raw = self._raw()
            gap = raw - self._last_raw
            self._last_raw = raw
            step = min(max(gap, 0.0), self.max_step_s)
            self._now += step
            now = self._now
            stalled = gap > self.max_step_s or gap < 0
            if stalled:
                self.stalls += 1
                self.skipped_s += max(gap - step, 0.0)
        if stalled and self._on_stall is not None:
            self._on_stall(gap, step)
        return now
