"""Admission control: who gets a 429, and when to come back.

Four strategies, selected by ``ConductorConfig.admission``:

``none``
    Admit everything; a full decode instance just batches more (TBT suffers).
``baseline``
    Admit before prefill; when the prefilled request reaches decode and no decode
    instance has room, reject it then (the prefill was wasted).
``early_reject``
    Reject *before* prefill when the current decode load is at or above
    ``load_threshold``, or the predicted TTFT/TBT misses its SLO. Judging on
    current load makes prefill and decode load swing in anti-phase.
``early_reject_predictive``
    Like ``early_reject`` but judges the decode load *at the time this request's
    prefill would finish*, ``t_f = now + predicted TTFT``, system-wide. Until enough
    decodes have been observed it uses the paper's rule, every request decoding for the
    same time ``D``::

        keep = max(0, 1 - (t_f - now) / D)               # decoding now, leaving at 1/D per s
        N(t_f) = N * keep + #{pending: finish <= t_f < finish + D} + 1
        C(t_f) = C * keep + sum(context of those pending) + this request's context
        reject if max(N(t_f) / slots, C(t_f) / kv_capacity) > load_threshold

    Once the Conductor has a learned duration distribution (``durations``, see
    :mod:`mooncake_core.conductor.durations`), each request counts with the probability
    that it is still decoding at ``t_f``: ``S(age + h) / S(age)`` for one decoding for
    ``age`` seconds now, ``S(t_f - finish)`` for a pending one that joins at ``finish``.
    This removes the uniform model's length bias (the requests still decoding are the
    long ones); docs/reproduction.md measures both forecasts' errors.

Decode load is ``max(requests / slots, context tokens / KV capacity)`` summed over the
pool: a decode instance runs out of batch slots or of KV memory, whichever comes first
(the token term is left out when an instance has no ``kv_capacity_tokens``).

Every strategy rejects at decode join when no instance has room (slots and KV), except
``none``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mooncake_core.conductor.decision import ADMIT, AdmissionResult
from mooncake_core.conductor.durations import DecodeDurations
from mooncake_core.conductor.state import DecodeInstanceState

__all__ = [
    "ADMISSIONS",
    "AdmissionContext",
    "AdmissionStrategy",
    "BaselineAdmission",
    "EarlyRejectAdmission",
    "NoAdmission",
    "PredictiveEarlyRejectAdmission",
    "make_admission",
]


@dataclass(frozen=True, slots=True)
class AdmissionContext:
    """What admission looks at for one request.

    Attributes:
        now: decision time.
        predicted_ttft_s: predicted TTFT of the chosen prefill plan.
        predicted_tbt_s: predicted TBT on the chosen decode instance.
        ttft_slo_s: TTFT SLO.
        tbt_slo_s: TBT SLO.
        decode: every decode instance's state.
        prefill_finishes: predicted prefill finish times of admitted requests that have
            not joined decode yet.
        decode_time_s: uniform decode duration ``D`` of one request.
        load_threshold: fraction of decode capacity at which to reject.
        min_retry_s: smallest retry hint given.
        max_retry_s: largest retry hint given.
        pending_joins: ``(predicted finish, context tokens)`` of admitted requests not in
            decode yet; when given, the predictive strategy counts their KV as well
            (empty: it counts ``prefill_finishes`` as requests only).
        request_tokens: context tokens this request will hold in decode (its prompt).
        durations: learned decode-duration distribution; when given and ready, the
            predictive strategy forecasts with it instead of the uniform ``D``.
        floor_ttft_s: the chosen plan's TTFT without its queue (``None``: unknown).
        floor_tbt_s: TBT of this request alone on an idle decode instance (``None``:
            unknown). A prediction over its SLO is rejected (429, retry later) only
            when waiting can bring it under: when the floor itself misses the SLO, no
            amount of waiting will, so the request is admitted (a 429 that can never
            clear would refuse every request, even on an idle cluster).
    """

    now: float
    predicted_ttft_s: float
    predicted_tbt_s: float
    ttft_slo_s: float
    tbt_slo_s: float
    decode: Sequence[DecodeInstanceState]
    prefill_finishes: Collection[float]
    decode_time_s: float
    load_threshold: float = 1.0
    min_retry_s: float = 0.5
    max_retry_s: float = 60.0
    pending_joins: Sequence[tuple[float, int]] = ()
    request_tokens: int = 0
    durations: DecodeDurations | None = None
    floor_ttft_s: float | None = None
    floor_tbt_s: float | None = None

    def capacity(self) -> int:
        """Total decode batch slots."""
        return sum(d.max_batch for d in self.decode)

    def kv_capacity(self) -> int | None:
        """Total decode KV capacity in tokens (``None`` when any instance is unlimited)."""
        total = 0
        for d in self.decode:
            if d.kv_capacity_tokens is None:
                return None
            total += d.kv_capacity_tokens
        return total

    def load(self, requests: float, tokens: float) -> float:
        """Pool load for ``requests`` decoding with ``tokens`` of context.

        Returns:
            ``max(requests / slots, tokens / kv_capacity)`` (slots only when the KV
            capacity is unknown).
        """
        slots = requests / self.capacity()
        kv = self.kv_capacity()
        return slots if kv is None else max(slots, tokens / kv)

    def retry(self, seconds: float) -> float:
        """Clamp a retry hint into ``[min_retry_s, max_retry_s]``."""
        return min(max(seconds, self.min_retry_s), self.max_retry_s)

    def decode_ends(self) -> list[float]:
        """Predicted end times of current decodes (join + D), sorted."""
        d = self.decode_time_s
        return sorted(t + d for inst in self.decode for t in inst.active_since())


def _clears(floor: float | None, slo: float) -> bool:
    # Whether waiting can meet the SLO: the prediction without load is within it.
    return floor is None or floor <= slo


def _slo_check(ctx: AdmissionContext) -> AdmissionResult | None:
    if ctx.predicted_ttft_s > ctx.ttft_slo_s and _clears(ctx.floor_ttft_s, ctx.ttft_slo_s):
        excess = ctx.predicted_ttft_s - ctx.ttft_slo_s
        return AdmissionResult(
            False,
            "ttft_slo",
            ctx.retry(excess),
            f"predicted TTFT {ctx.predicted_ttft_s:.3f}s exceeds the SLO {ctx.ttft_slo_s:.3f}s",
        )
    if ctx.predicted_tbt_s > ctx.tbt_slo_s and _clears(ctx.floor_tbt_s, ctx.tbt_slo_s):
        ends = ctx.decode_ends()
        wait = (ends[0] - ctx.now) if ends else ctx.decode_time_s
        return AdmissionResult(
            False,
            "tbt_slo",
            ctx.retry(wait),
            f"predicted TBT {ctx.predicted_tbt_s * 1000:.1f}ms exceeds the SLO {ctx.tbt_slo_s * 1000:.1f}ms",
        )
    return None


class AdmissionStrategy:
    """Base: decide before prefill, and whether a full decode batch may overflow at join."""

    name: ClassVar[str] = ""
    overflow_at_join: ClassVar[bool] = False
    """Whether a request may join a full decode instance instead of being rejected."""

    def before_prefill(self, ctx: AdmissionContext) -> AdmissionResult:
        """Verdict at scheduling time."""
        del ctx
        return ADMIT


class NoAdmission(AdmissionStrategy):
    """Admit everything, even into full decode batches."""

    name = "none"
    overflow_at_join = True


class BaselineAdmission(AdmissionStrategy):
    """Admit before prefill; reject only at decode join when every decode instance is full."""

    name = "baseline"


class EarlyRejectAdmission(AdmissionStrategy):
    """Reject before prefill on *current* decode load or a predicted SLO miss."""

    name = "early_reject"

    def before_prefill(self, ctx: AdmissionContext) -> AdmissionResult:
        """Reject when decoding now fills ``load_threshold`` of capacity, or SLOs would be missed."""
        active = sum(d.batch for d in ctx.decode)
        tokens = sum(d.context_tokens for d in ctx.decode)
        load = ctx.load(active, tokens)
        kv = ctx.kv_capacity()
        # Slots are whole: the pool is full when the count reaches the limit. KV is not:
        # it is full for this request when its prompt would not fit under the limit (a
        # pool is never exactly 100% full of tokens, so ">= limit" would never fire).
        kv_full = kv is not None and (tokens + ctx.request_tokens) / kv > ctx.load_threshold
        if load >= ctx.load_threshold or kv_full:
            ends = ctx.decode_ends()
            wait = (ends[0] - ctx.now) if ends else ctx.decode_time_s
            if load >= ctx.load_threshold:
                why = f"load {load:.3f} >= limit {ctx.load_threshold:g}"
            else:
                why = (
                    f"this prompt's {ctx.request_tokens} tokens would not fit: "
                    f"{tokens} + {ctx.request_tokens} > {ctx.load_threshold:g} x {kv} KV tokens"
                )
            return AdmissionResult(
                False,
                "decode_full",
                ctx.retry(wait),
                f"{active} requests decoding ({tokens} context tokens): {why} "
                f"({ctx.capacity()} slots, {ctx.kv_capacity()} KV tokens)",
            )
        return _slo_check(ctx) or ADMIT


class PredictiveEarlyRejectAdmission(AdmissionStrategy):
    """Reject before prefill on the decode load predicted for when the prefill finishes."""

    name = "early_reject_predictive"

    def before_prefill(self, ctx: AdmissionContext) -> AdmissionResult:
        """Forecast ``load(now + TTFT)`` (learned durations, else uniform ``D``) against capacity."""
        slo = _slo_check(ctx)
        if slo is not None and slo.reason == "ttft_slo":
            return slo
        d = ctx.decode_time_s
        horizon = max(ctx.predicted_ttft_s, 0.0)
        durations = ctx.durations
        learned = durations is not None and durations.ready
        if durations is not None and learned:
            # Survival weights are at most 1: when every request decoding now and every
            # pending one together still fit, so does the forecast (the common, cheap case).
            t_f = ctx.now + horizon
            bound_n = sum(dec.batch for dec in ctx.decode) + 1
            bound_c = sum(dec.context_tokens for dec in ctx.decode) + ctx.request_tokens
            for f, c in ctx.pending_joins:
                if f <= t_f:
                    bound_n += 1
                    bound_c += c
            if not ctx.pending_joins:
                bound_n += sum(1 for f in ctx.prefill_finishes if f <= t_f)
            if ctx.load(bound_n, bound_c) <= ctx.load_threshold:
                return slo or ADMIT
            load, tokens = _survival_forecast(ctx, durations, horizon)
        else:
            load, tokens = _uniform_forecast(ctx, horizon)
        frac = ctx.load(load + 1, tokens + ctx.request_tokens)
        if frac > ctx.load_threshold:
            # Retry once the excess has drained at the departure rate of the load at t_f
            # (each of its requests leaves within D).
            before = ctx.load(load, tokens)
            wait = (frac - ctx.load_threshold) * d / before if before > 0 else d
            return AdmissionResult(
                False,
                "decode_load_predicted",
                ctx.retry(wait),
                f"predicted decode load {frac:.3f} ({load:.1f} requests, {tokens:.0f} tokens) "
                f"at t+{horizon:.3f}s, limit {ctx.load_threshold:g} "
                f"({'learned durations' if learned else f'uniform D={d:.1f}s'})",
            )
        return slo or ADMIT


def _uniform_forecast(ctx: AdmissionContext, horizon: float) -> tuple[float, float]:
    """Requests and tokens decoding at ``now + horizon``, every request decoding for ``D``."""
    d = ctx.decode_time_s
    t_f = ctx.now + horizon
    active = sum(dec.batch for dec in ctx.decode)
    # Departures by t_f from Little's law: N requests that each decode for D leave at
    # N / D per second. Per-request "join + D" would call every request older than D
    # finished, but the requests still decoding are the long ones (length bias), so
    # that under-predicts load exactly when output lengths are skewed.
    keep = max(0.0, 1.0 - horizon / d) if d > 0 else 0.0
    load = active * keep
    tokens = sum(dec.context_tokens for dec in ctx.decode) * keep
    if ctx.pending_joins:
        for f, ctx_tokens in ctx.pending_joins:
            if f <= t_f < f + d:
                load += 1
                tokens += ctx_tokens
    else:
        for f in ctx.prefill_finishes:
            if f <= t_f < f + d:
                load += 1
    return load, tokens


def _survival_forecast(
    ctx: AdmissionContext, durations: DecodeDurations, horizon: float
) -> tuple[float, float]:
    """Expected requests and tokens decoding at ``now + horizon`` from learned durations."""
    t_f = ctx.now + horizon
    active = [r for dec in ctx.decode for r in dec.active_requests()]
    pending = [(f, c) for f, c in ctx.pending_joins if f <= t_f]
    if not pending and not ctx.pending_joins:
        pending = [(f, 0) for f in ctx.prefill_finishes if f <= t_f]
    na, npend = len(active), len(pending)
    if na + npend == 0:
        return 0.0, 0.0
    # One survival lookup for everything: S(age), S(age + h) of the decoding requests,
    # S(t_f - finish) of the pending ones (numpy call overhead dominates at these sizes).
    times, tokens = zip(*active, *pending, strict=True)
    t = np.array(times, dtype=np.float64)
    c = np.array(tokens, dtype=np.float64)
    ages = ctx.now - t[:na]
    s = durations.survival(np.concatenate((ages, ages + horizon, t_f - t[na:])))
    s0, s1, stay = s[:na], s[na : 2 * na], s[2 * na :]
    keep = np.ones(na)
    np.divide(s1, s0, out=keep, where=s0 > 0)
    weights = np.concatenate((keep, stay))
    return float(weights.sum()), float(weights @ c)


ADMISSIONS: dict[str, type[AdmissionStrategy]] = {
    a.name: a
    for a in (NoAdmission, BaselineAdmission, EarlyRejectAdmission, PredictiveEarlyRejectAdmission)
}
"""Admission strategies by configuration name."""


def make_admission(name: str) -> AdmissionStrategy:
    """Build the admission strategy called ``name``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    cls = ADMISSIONS.get(name)
    if cls is None:
        raise ValueError(
            f"unknown admission strategy {name!r}; known: {', '.join(sorted(ADMISSIONS))}"
        )
    return cls()
