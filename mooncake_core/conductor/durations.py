"""Learned distribution of decode durations, for forecasting decode load.

The paper's prediction-based early rejection assumes every request decodes for the same
time ``D``. Real decode durations are heavy-tailed (output lengths span 1 to thousands of
tokens), so the uniform model is wrong in a specific way: the requests still decoding at
any instant are the long ones (length bias), and a forecast further ahead than ``D``
calls every one of them finished. This module keeps the empirical distribution of the
last ``window`` observed durations and answers, for a request that has decoded for
``age`` seconds, the probability that it is still decoding ``h`` seconds later:

    keep(age, h) = S(age + h) / S(age),    S(x) = P(duration > x)

A request older than every sample has no empirical answer; it is assumed to stay (the
conservative choice: the forecast never frees KV it cannot justify).

Sans-IO: durations are pushed in by the scheduler, nothing here reads a clock.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

__all__ = ["DecodeDurations"]

FloatArray = npt.NDArray[np.float64]


class DecodeDurations:
    """Sliding window of observed decode durations and its survival function.

    The survival function is computed on a sorted copy of the window that is refreshed
    after every ``window // 32`` new durations (always while fewer than ``min_samples``
    were sorted), so it may lag the newest few.

    Args:
        window: most recent durations kept (older ones drop out, so the model follows a
            changing workload).
        min_samples: durations needed before :attr:`ready` is true; until then callers
            fall back to the uniform-``D`` rule.

    Raises:
        ValueError: ``window`` below 1, or ``min_samples`` outside ``[1, window]``.
    """

    def __init__(self, window: int, min_samples: int) -> None:
        if window < 1:
            raise ValueError(f"decode duration window must be >= 1, got {window}")
        if not 1 <= min_samples <= window:
            raise ValueError(
                f"decode duration min_samples must be in [1, window={window}], got {min_samples}"
            )
        self.min_samples = min_samples
        self._samples: deque[float] = deque(maxlen=window)
        self._sorted: FloatArray | None = None
        # The sorted copy is rebuilt once ~3% of the window is new, not after every
        # sample: a decision must not pay an O(window) sort each time a decode ends, and
        # the distribution of 1024 durations barely moves with the 32 newest.
        self._refresh = max(1, window // 32)
        self._stale = 0

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def ready(self) -> bool:
        """Whether enough durations were seen to trust the distribution."""
        return len(self._samples) >= self.min_samples

    def add(self, seconds: float) -> None:
        """Record one observed decode duration (join to last token).

        Raises:
            ValueError: a negative or non-finite duration.
        """
        if not seconds >= 0 or seconds == float("inf"):
            raise ValueError(f"decode duration must be finite and >= 0, got {seconds}")
        self._samples.append(float(seconds))
        self._stale += 1
        if self._sorted is not None and (
            self._stale >= self._refresh or len(self._sorted) < self.min_samples
        ):
            self._sorted = None

    def survival(self, x: FloatArray) -> FloatArray:
        """``S(x) = P(duration > x)`` for each element of ``x`` (empirical)."""
        s = self._sorted_samples()
        n = len(s)
        if n == 0:
            return np.ones_like(x, dtype=np.float64)
        return (n - np.searchsorted(s, x, side="right")) / n

    def keep(self, ages: FloatArray, horizon: float) -> FloatArray:
        """Probability that requests decoding for ``ages`` seconds still decode ``horizon`` later.

        Returns:
            ``S(age + horizon) / S(age)``; 1.0 where ``S(age)`` is 0 (older than every
            sample: assumed to stay).
        """
        s0 = self.survival(ages)
        s1 = self.survival(ages + max(horizon, 0.0))
        out = np.ones_like(s0)
        np.divide(s1, s0, out=out, where=s0 > 0)
        return out

    def _sorted_samples(self) -> FloatArray:
        if self._sorted is None:
            self._sorted = np.sort(np.fromiter(self._samples, dtype=np.float64))
            self._stale = 0
        return self._sorted
