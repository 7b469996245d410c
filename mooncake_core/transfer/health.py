"""Per-NIC health: pause a NIC that keeps failing, with exponential backoff (sans-IO).

::

    HEALTHY --(threshold consecutive failures)--> PAUSED until now + pause
    PAUSED  --(time passes)--> PROBING (usable again: the next slice is the probe)
    PROBING --success--> HEALTHY (backoff reset)
    PROBING --failure--> PAUSED with the pause doubled (capped)

Time is passed in (``now``, seconds on any monotonic clock).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NicHealthState:
    """Health of one NIC at a point in time."""

    consecutive_failures: int
    paused: bool
    paused_until: float | None
    next_pause_s: float


class _Entry:
    __slots__ = ("failures", "next_pause", "paused_until", "probing")

    def __init__(self, first_pause: float) -> None:
        self.failures = 0
        self.next_pause = first_pause
        self.paused_until: float | None = None
        self.probing = False


class NicHealth:
    """Failure counting and pausing for a set of NICs (any hashable names).

    Args:
        threshold: Consecutive failures that pause a NIC.
        pause_s: First pause length.
        pause_max_s: Longest pause (doubling stops here).
    """

    def __init__(self, threshold: int, pause_s: float, pause_max_s: float) -> None:
        if threshold < 1:
            raise ValueError(f"threshold must be >= 1, got {threshold}")
        if pause_s <= 0 or pause_max_s < pause_s:
            raise ValueError(f"need 0 < pause_s <= pause_max_s, got {pause_s}, {pause_max_s}")
        self.threshold = threshold
        self.pause_s = pause_s
        self.pause_max_s = pause_max_s
        self._nics: dict[str, _Entry] = {}

    def _entry(self, nic: str) -> _Entry:
        entry = self._nics.get(nic)
        if entry is None:
            entry = self._nics[nic] = _Entry(self.pause_s)
        return entry

    def available(self, nic: str, now: float) -> bool:
        """Whether ``nic`` may carry traffic now (healthy, or its pause is over)."""
        entry = self._nics.get(nic)
        if entry is None or entry.paused_until is None:
            return True
        if now >= entry.paused_until:
            entry.paused_until = None
            entry.probing = True
            return True
        return False

    def record_success(self, nic: str, now: float) -> None:
        """A slice over ``nic`` succeeded: clear failures and backoff."""
        del now  # kept for a uniform stimulus signature
        entry = self._entry(nic)
        entry.failures = 0
        entry.probing = False
        entry.paused_until = None
        entry.next_pause = self.pause_s

    def record_failure(self, nic: str, now: float) -> bool:
        """A slice over ``nic`` failed.

        Returns:
            True if this failure paused the NIC.
        """
        entry = self._entry(nic)
        if entry.paused_until is not None and now < entry.paused_until:
            return False  # late failure of a slice sent before the pause
        entry.failures += 1
        if entry.probing or entry.failures >= self.threshold:
            entry.paused_until = now + entry.next_pause
            entry.next_pause = min(entry.next_pause * 2, self.pause_max_s)
            entry.probing = False
            entry.failures = 0
            return True
        return False

    def known(self) -> list[str]:
        """NICs that ever recorded an outcome."""
        return list(self._nics)

    def state(self, nic: str, now: float) -> NicHealthState:
        """Read-only view of ``nic`` (does not start a probe)."""
        entry = self._nics.get(nic)
        if entry is None:
            return NicHealthState(0, False, None, self.pause_s)
        paused = entry.paused_until is not None and now < entry.paused_until
        return NicHealthState(
            entry.failures, paused, entry.paused_until if paused else None, entry.next_pause
        )
