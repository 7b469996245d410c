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

3. **Guarded choice: the learned model alone may not fetch more.** Learned corrections
   can be confidently wrong: under NIC contention the transfer ratio collapsed, adaptive
   fetched 3.7x more and was 14.7x worse than ``kvcache_centric`` on a held-out trace.
   So every decision also computes ``kvcache_centric``'s choice ``K`` (configured
   threshold, uncorrected predictions) and adaptive's own choice ``A`` (learned
   threshold, corrected predictions), and takes ``A`` only when the learned model
   prefers it by more than its own recent error, and, unless ``A`` moves fewer blocks
   over the network than ``K``, the uncorrected model prefers it too::

       corrected(A) * (1 + err) < corrected(K)
       and (fetched(A) < fetched(K)  or  raw(A) <= raw(K))

   where ``err`` is the exponentially weighted mean of ``|actual/predicted - 1|`` of the
   corrected execution-time predictions; otherwise it takes ``K``. The asymmetry is
   because a fetch has a cost the per-request prediction does not see: it loads NICs that
   other requests' transfers and KV streams share, so a wrongly low transfer correction
   feeds on itself (more fetches, more contention, the failure above); a move *away*
   from the network has no such loop. With no learning yet (corrections 1, threshold at
   its start) ``A`` is ``K`` and the two policies make the same decisions. No constant
   here is fitted to a trace: the margin is the learned model's measured error.

4. **A correction is applied only while the evidence supports it, with hysteresis.**
   Each correction also keeps the exponentially weighted mean and variance of the log of
   its samples (:class:`CorrectionSupport`). It is applied (``prefill_scale``,
   ``transfer_scale``) only once that mean differs from 0 by more than ``engage_z``
   standard errors, and stays applied until it falls below ``release_z``; otherwise the
   model's own prediction stands (factor 1). Noisy ratios around 1 (transfers that are
   sometimes slower, sometimes faster than predicted under changing contention) then
   change nothing, instead of moving every decision with the last few samples, and a
   correction does not flap on and off at the edge. The z values are the usual
   two-standard-error test, not fitted to a trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mooncake_core.conductor.policies.base import (
    PolicyChoice,
    PolicyContext,
    PrefillFeedback,
    PrefillPlan,
)
from mooncake_core.conductor.policies.kvcache_centric import KVCacheCentricPolicy, fetch_ratio

__all__ = ["AdaptiveOptions", "AdaptivePolicy", "CorrectionSupport"]


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
        engage_z: a correction is applied once the EW mean of its log-ratio samples is
            this many standard errors from 0.
        release_z: an applied correction is dropped when that falls below this.
    """

    step: float = 0.05
    band: float = 1.5
    min_threshold: float = 1.0
    max_threshold: float = 1000.0
    ewma: float = 0.1
    min_ratio: float = 0.01
    max_ratio: float = 100.0
    engage_z: float = 2.0
    release_z: float = 1.0

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
        if not 0 <= self.release_z <= self.engage_z:
            raise ValueError(
                f"need 0 <= release_z <= engage_z, got {self.release_z}, {self.engage_z}"
            )


@dataclass(slots=True)
class CorrectionSupport:
    """Whether a learned correction is supported by its samples (rule 4), with hysteresis.

    Attributes:
        mean: EW mean of ``log(sample)``.
        var: EW variance of ``log(sample)``.
        samples: samples seen.
        engaged: whether the correction is applied now.
    """

    mean: float = 0.0
    var: float = 0.0
    samples: int = 0
    engaged: bool = False

    def z(self, weight: float) -> float:
        """``|mean|`` in standard errors; 0 before two samples.

        The standard error divides the variance by the samples seen less one, at most
        the effective sample count of the EW average, ``(2 - weight) / weight``.
        """
        if self.samples < 2:
            return 0.0
        n = min(float(self.samples - 1), (2.0 - weight) / weight)
        se = math.sqrt(self.var / n)
        if se == 0.0:
            return math.inf if self.mean != 0.0 else 0.0
        return abs(self.mean) / se

    def add(self, ratio: float, weight: float, engage_z: float, release_z: float) -> None:
        """Fold in one sample (a positive ratio) and update ``engaged``.

        Until ``1 / samples`` falls below ``weight`` this is the plain mean and variance
        of the samples so far (an EW average started at the first sample would take
        two samples' spread for the truth); after that, EW with ``weight``.
        """
        x = math.log(ratio)
        self.samples += 1
        a = max(weight, 1.0 / self.samples)
        d = x - self.mean
        self.mean += a * d
        self.var = (1.0 - a) * (self.var + a * d * d)
        z = self.z(weight)
        self.engaged = z > release_z if self.engaged else z > engage_z


def _fetched(plan: PrefillPlan) -> int:
    """Blocks the plan moves over the network."""
    return plan.used_blocks - plan.local_blocks if plan.fetches else 0


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
        self.base_threshold = float(threshold)
        self.rho_prefill = 1.0
        self.error = 0.0
        """EW mean of ``|actual/predicted - 1|`` of corrected execution predictions."""
        self.deviations = 0
        """Decisions where adaptive's own choice was taken over kvcache_centric's."""
        self.vetoes = 0
        """Decisions where adaptive's choice differed but did not win under both models."""
        self.rho_transfer = 1.0
        self.moves_up = 0
        self.moves_down = 0
        self.prefill_support = CorrectionSupport()
        """Support of ``rho_prefill`` (rule 4)."""
        self.transfer_support = CorrectionSupport()
        """Support of ``rho_transfer`` (rule 4)."""

    @property
    def prefill_scale(self) -> float:
        """Compute correction in force: ``rho_p`` while supported, else 1."""
        return self.rho_prefill if self.prefill_support.engaged else 1.0

    @property
    def transfer_scale(self) -> float:
        """Transfer correction in force: ``rho_x`` while supported, else 1."""
        return self.rho_transfer if self.transfer_support.engaged else 1.0

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """kvcache_centric's choice unless the learned model's differs and wins (see rule 3)."""
        if not ctx.instances:
            raise ValueError("no prefill instance to schedule on")
        best = ctx.match.best_len
        by_location = ctx.match.by_location
        theta0 = self.base_threshold
        theta = self.threshold or 0.0
        ps, xs = ctx.prefill_scale, ctx.transfer_scale
        fetch_plan, local_plan = ctx.fetch_plan, ctx.local_plan
        ref: list[PrefillPlan] = []
        own: list[PrefillPlan] = []
        for state in ctx.instances:
            local = by_location.get(state.name, 0)
            longer = best > local
            f0 = longer and (local <= 0 or best / local > theta0)
            f1 = longer and (local <= 0 or best / local > theta)
            p0 = fetch_plan(state) if f0 else local_plan(state)
            ref.append(p0)
            own.append(p0 if f0 == f1 else (fetch_plan(state) if f1 else local_plan(state)))

        def raw(p: PrefillPlan) -> float:
            return (p.queue_s + p.prefill_s) / ps + p.transfer_s / xs + p.overhead_s

        k = min(range(len(ref)), key=lambda i: (raw(ref[i]), i))
        a = min(range(len(own)), key=lambda i: (own[i].ttft_s, i))
        pk, pa = ref[k], own[a]
        plans, chosen = ref, k
        if a != k or pa.fetches != pk.fetches:
            take = pa.ttft_s * (1.0 + self.error) < pk.ttft_s
            if take and _fetched(pa) >= _fetched(pk):
                take = raw(pa) <= raw(pk)
            if take:
                plans, chosen = own, a
                self.deviations += 1
            else:
                self.vetoes += 1
        winner = plans[chosen]
        alternative = None
        if best > winner.local_blocks:
            state = ctx.instances[chosen]
            alternative = local_plan(state) if winner.fetches else fetch_plan(state)
            if alternative.fetches == winner.fetches:
                alternative = None
        return PolicyChoice(
            chosen, tuple(plans), "ttft", alternative, fetch_ratio(best, winner.local_blocks)
        )

    def _blend(self, old: float, sample: float, support: CorrectionSupport) -> float:
        o = self.options
        sample = min(max(sample, o.min_ratio), o.max_ratio)
        support.add(sample, o.ewma, o.engage_z, o.release_z)
        return (1 - o.ewma) * old + o.ewma * sample

    def observe(self, feedback: PrefillFeedback) -> None:
        """Update the corrections, then move the threshold if the request was borderline."""
        fb = feedback
        actual = fb.actual_exec_s
        if not math.isfinite(actual) or actual < 0:
            return
        predicted = fb.plan.transfer_s + fb.plan.prefill_s
        if predicted > 0:
            w = self.options.ewma
            self.error = (1 - w) * self.error + w * abs(actual / predicted - 1.0)
        # Corrections: learn from the plan that ran.
        if fb.plan.fetches:
            if fb.actual_transfer_s is not None and fb.actual_transfer_s <= 0:
                # Nothing was fetched (the source lost the blocks meanwhile): this run says
                # nothing about transfer speed or about the threshold.
                return
            if fb.actual_transfer_s is not None and fb.raw_transfer_s > 0:
                self.rho_transfer = self._blend(
                    self.rho_transfer,
                    fb.actual_transfer_s / fb.raw_transfer_s,
                    self.transfer_support,
                )
                if fb.raw_prefill_s > 0:
                    compute = max(actual - fb.actual_transfer_s, 0.0)
                    self.rho_prefill = self._blend(
                        self.rho_prefill, compute / fb.raw_prefill_s, self.prefill_support
                    )
            elif fb.raw_transfer_s > 0:
                transfer = max(actual - self.rho_prefill * fb.raw_prefill_s, 0.0)
                self.rho_transfer = self._blend(
                    self.rho_transfer, transfer / fb.raw_transfer_s, self.transfer_support
                )
        elif fb.raw_prefill_s > 0:
            self.rho_prefill = self._blend(
                self.rho_prefill, actual / fb.raw_prefill_s, self.prefill_support
            )
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
