"""Rates of cumulative counters over a sliding time window (sans-IO: ``now`` passed in)."""

from __future__ import annotations

from collections import deque

__all__ = ["RateBook", "RateWindow"]


class RateWindow:
    """Rate of one cumulative counter over the last ``window_s`` seconds.

    Samples older than the window are dropped, except the newest one before the window
    (kept as the baseline so a rate exists as soon as two samples span any time). A
    counter that goes *down* was reset (the process restarted): the history before the
    reset is discarded instead of producing a negative rate.

    Args:
        window_s: Width of the window, seconds.

    Raises:
        ValueError: ``window_s`` not positive.
    """

    def __init__(self, window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> None:
        """Record that the counter read ``value`` at ``now``.

        Raises:
            ValueError: ``now`` earlier than the previous sample (time must not go back).
        """
        if self._samples:
            last_t, last_v = self._samples[-1]
            if now < last_t:
                raise ValueError(f"sample time {now} is before the previous one {last_t}")
            if value < last_v:
                self._samples.clear()
        self._samples.append((now, value))
        cutoff = now - self.window_s
        while len(self._samples) > 2 and self._samples[1][0] <= cutoff:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Units per second between the oldest and newest samples kept.

        Returns:
            The rate, or ``None`` with fewer than two samples or no time between them.
        """
        if len(self._samples) < 2:
            return None
        t0, v0 = self._samples[0]
        t1, v1 = self._samples[-1]
        if t1 <= t0:
            return None
        return (v1 - v0) / (t1 - t0)

    def __len__(self) -> int:
        return len(self._samples)


class RateBook:
    """Many :class:`RateWindow` keyed by a tuple, created on first use.

    Args:
        window_s: Window of every rate.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._windows: dict[tuple[str, ...], RateWindow] = {}

    def add(self, key: tuple[str, ...], now: float, value: float) -> float | None:
        """Record a sample and return the key's rate after it."""
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = RateWindow(self.window_s)
        w.add(now, value)
        return w.rate()

    def rate(self, key: tuple[str, ...]) -> float | None:
        """The key's current rate (``None`` if unknown or not enough samples)."""
        w = self._windows.get(key)
        return None if w is None else w.rate()

    def forget(self, prefix: tuple[str, ...]) -> None:
        """Drop every window whose key starts with ``prefix`` (a node went away)."""
        n = len(prefix)
        for k in [k for k in self._windows if k[:n] == prefix]:
            del self._windows[k]
