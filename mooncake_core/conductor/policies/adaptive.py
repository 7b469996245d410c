"""Adaptive KVCache-centric scheduling: Algorithm 1 with a self-tuning threshold.

The paper tunes ``kvcache_balancing_threshold`` by hand. The threshold exists because
the predictions behind "fetch or not" are imperfect (the network may be busier than
measured, the prefill model may be off). This policy learns both corrections online and
moves the threshold towards the ratio where fetching stops paying off.

1. **Prediction corrections.** On every finished prefill it compares the measured
   execution time (prefill start to done, fetch included) with the prediction, keeping
   exponentially weighted ratios ``rho_p`` (compute: actual/predicted, from local plans,
   or from fetching plans when the worker reports the fetch time) and ``rho_x`` (transfer:
   measured fetch time, or execution minus corrected compute, over predicted). All
   predicted compute and queue times are multiplied by ``rho_p``, transfer times by
   ``rho_x``.

2. **Threshold.** Only *borderline* requests teach it: the chosen instance had a choice
   (the best prefix lived elsewhere) and ``best/local`` was within a factor ``band`` of the
   threshold. For each, the realised cost of the taken plan (measured) is compared with
   the corrected prediction of the plan not taken on the same instance::

       fetched and fetching was cheaper  or  stayed local and fetching would have been cheaper
           -> threshold *= exp(-step)   (fetch more readily)
       otherwise
           -> threshold *= exp(+step)   (fetch less readily)

   A sign-only multiplicative step is a stochastic-approximation rule: it settles where
   the borderline requests that would have been better fetched and those better kept
   local balance, i.e. at the empirical break-even ratio, whatever the scale of times
   and without fitting anything to a particular trace. It is clamped to
   ``[min_threshold, max_threshold]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mooncake_core.conductor.policies.base import PrefillFeedback
from mooncake_core.conductor.policies.kvcache_centric import KVCacheCentricPolicy

__all__ = ["AdaptiveOptions", "AdaptivePolicy"]


@dataclass(frozen=True, slots=True)
class AdaptiveOptions:
    """Knobs of the adaptive rule (defaults are generic, not fitted to a trace).

    Attributes:
        step: log-step of one threshold move (0.05: about 5%).
        band: a request is borderline when ``threshold/band <= ratio <= threshold*band``.
        min_threshold: lowest threshold (1: fetch only strictly longer prefixes).
        max_threshold: highest threshold.
        ewma: weight of a new sample in the prediction corrections.
        min_ratio: smallest correction factor accepted.
        max_ratio: largest correction factor accepted.
    """

    step: float = 0.05
    band: float = 1.5
    min_threshold: float = 1.0
    max_threshold: float = 1000.0
    ewma: float = 0.1
    min_ratio: float = 0.01
    max_ratio: float = 100.0

    def __post_init__(self) -> None:
        if not 0 < self.step <= 1:
            raise ValueError(f"step must be in (0, 1], got {self.step}")
        if self.band < 1:
            raise ValueError(f"band must be >= 1, got {self.band}")
        if not 0 <= self.min_threshold <= self.max_threshold:
            raise ValueError(
                f"need 0 <= min_threshold <= max_threshold, got {self.min_threshold}, {self.max_threshold}"
            )
        if not 0 < self.ewma <= 1:
            raise ValueError(f"ewma must be in (0, 1], got {self.ewma}")
        if not 0 < self.min_ratio <= 1 <= self.max_ratio:
            raise ValueError(
                f"need 0 < min_ratio <= 1 <= max_ratio, got {self.min_ratio}, {self.max_ratio}"
            )


class AdaptivePolicy(KVCacheCentricPolicy):
    """Algorithm 1 whose threshold and time predictions correct themselves from feedback.

    Args:
        seed: unused (deterministic policy).
        threshold: starting threshold.
        options: learning knobs.
    """

    name = "adaptive"

    def __init__(
        self, seed: int = 0, threshold: float = 1.5, options: AdaptiveOptions | None = None
    ) -> None:
        super().__init__(seed, threshold)
        self.options = options or AdaptiveOptions()
        o = self.options
        self.threshold = min(max(float(threshold), o.min_threshold), o.max_threshold)
        self.rho_prefill = 1.0
        self.rho_transfer = 1.0
        self.moves_up = 0
        self.moves_down = 0

    @property
    def prefill_scale(self) -> float:
        """Learned compute correction ``rho_p``."""
        return self.rho_prefill

    @property
    def transfer_scale(self) -> float:
        """Learned transfer correction ``rho_x``."""
        return self.rho_transfer

    def _blend(self, old: float, sample: float) -> float:
        o = self.options
        sample = min(max(sample, o.min_ratio), o.max_ratio)
        return (1 - o.ewma) * old + o.ewma * sample

    def observe(self, feedback: PrefillFeedback) -> None:
        """Update the corrections, then move the threshold if the request was borderline."""
        fb = feedback
        actual = fb.actual_exec_s
        if not math.isfinite(actual) or actual < 0:
            return
        # Corrections: learn from the plan that ran.
        if fb.plan.fetches:
            if fb.actual_transfer_s is not None and fb.actual_transfer_s <= 0:
                # Nothing was fetched (the source lost the blocks meanwhile): this run says
                # nothing about transfer speed or about the threshold.
                return
            if fb.actual_transfer_s is not None and fb.raw_transfer_s > 0:
                self.rho_transfer = self._blend(
                    self.rho_transfer, fb.actual_transfer_s / fb.raw_transfer_s
                )
                if fb.raw_prefill_s > 0:
                    compute = max(actual - fb.actual_transfer_s, 0.0)
                    self.rho_prefill = self._blend(self.rho_prefill, compute / fb.raw_prefill_s)
            elif fb.raw_transfer_s > 0:
                transfer = max(actual - self.rho_prefill * fb.raw_prefill_s, 0.0)
                self.rho_transfer = self._blend(self.rho_transfer, transfer / fb.raw_transfer_s)
        elif fb.raw_prefill_s > 0:
            self.rho_prefill = self._blend(self.rho_prefill, actual / fb.raw_prefill_s)
        # Threshold: only borderline choices carry information about it.
        if fb.alternative is None or not math.isfinite(fb.ratio) or fb.ratio <= 0:
            return
        threshold = self.threshold or self.options.min_threshold
        if abs(math.log(fb.ratio / threshold)) > math.log(self.options.band):
            return
        if fb.plan.fetches:
            other = self.rho_prefill * fb.raw_alt_prefill_s
            fetch_won = actual < other
        else:
            # Scale the counterfactual's compute by this request's own observed error.
            own = actual / fb.raw_prefill_s if fb.raw_prefill_s > 0 else self.rho_prefill
            other = self.rho_transfer * fb.raw_alt_transfer_s + own * fb.raw_alt_prefill_s
            fetch_won = other < actual
        o = self.options
        if fetch_won:
            self.threshold = max(o.min_threshold, threshold * math.exp(-o.step))
            self.moves_down += 1
        else:
            self.threshold = min(o.max_threshold, threshold * math.exp(o.step))
            self.moves_up += 1
