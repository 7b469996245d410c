"""Per-request results of a simulation and the summary computed from them."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from mooncake_core.prediction_error import relative_error

__all__ = ["LoadSample", "RequestResult", "SimResult", "Summary", "worst_decile_mean"]


def worst_decile_mean(intervals: Sequence[float] | np.ndarray) -> float:
    """Mean of the worst 10% of token intervals (DESIGN.md's TBT), at least one interval.

    Args:
        intervals: seconds between consecutive tokens of one request.

    Returns:
        The TBT in seconds; 0.0 for no intervals.
    """
    n = len(intervals)
    if n == 0:
        return 0.0
    k = max(1, math.ceil(n * 0.1))
    arr = np.asarray(intervals, dtype=float)
    if k >= n:
        return float(arr.mean())
    return float(np.partition(arr, n - k)[n - k :].mean())


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What happened to one request.

    Attributes:
        rid: trace position.
        arrival_s: arrival time.
        input_length: prompt tokens.
        output_length: output tokens.
        rejected: whether it was rejected (before prefill or at decode join).
        reason: rejection code (``""`` when served).
        prefill_instance: where it prefilled (``""`` when rejected before prefill).
        decode_instance: where it decoded (``""`` when not).
        ttft_s: arrival to first token, ``nan`` when rejected before prefill.
        tbt_s: mean of the worst 10% token intervals, ``nan`` when it never decoded.
        finish_s: time of the last token, ``nan`` when not served.
        prefix_hit_blocks: blocks reused (local hit plus fetched).
        local_hit_blocks: blocks the prefill instance held itself at prefill start.
        fetched_blocks: blocks fetched from another location.
        transferred_bytes: bytes moved for this request (prefix fetch + KV to decode).
        predicted_ttft_s: the Conductor's predicted TTFT.
        wasted_prefill: prefilled then rejected at decode join.
    """

    rid: int
    arrival_s: float
    input_length: int
    output_length: int
    rejected: bool
    reason: str
    prefill_instance: str
    decode_instance: str
    ttft_s: float
    tbt_s: float
    finish_s: float
    prefix_hit_blocks: int
    local_hit_blocks: int
    fetched_blocks: int
    transferred_bytes: int
    predicted_ttft_s: float
    wasted_prefill: bool = False


@dataclass(frozen=True, slots=True)
class LoadSample:
    """Cluster load at one instant (for the oscillation plot).

    Attributes:
        time_s: sample time.
        prefill_load: mean over prefill instances of queued + running work, in seconds
            of predicted compute, divided by the sampling window (1.0 = one window's work).
        prefill_busy: fraction of prefill instance-time spent computing (or fetching)
            since the previous sample.
        decode_load: requests decoding over total decode slots.
        decode_kv: KV tokens held over total decode KV capacity.
    """

    time_s: float
    prefill_load: float
    prefill_busy: float
    decode_load: float
    decode_kv: float


@dataclass(frozen=True, slots=True)
class Summary:
    """Headline numbers of one run.

    ``ttft_err_*`` are the relative TTFT prediction errors ``|actual - predicted| /
    actual`` (:mod:`mooncake_core.prediction_error`) of the served requests: their
    median, 90th percentile and mean.
    """

    requests: int
    served: int
    rejected: int
    rejected_by_reason: dict[str, int]
    wasted_prefills: int
    avg_ttft_s: float
    p50_ttft_s: float
    p90_ttft_s: float
    p99_ttft_s: float
    avg_tbt_s: float
    p90_tbt_s: float
    hit_rate: float
    local_hit_rate: float
    transferred_gb: float
    goodput_rps: float
    slo_attainment: float
    makespan_s: float
    ttft_err_p50: float = math.nan
    ttft_err_p90: float = math.nan
    ttft_err_mean: float = math.nan

    def as_dict(self) -> dict[str, object]:
        """Plain dict (JSON-friendly)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class SimResult:
    """A finished run: per-request results, load samples and counters."""

    requests: list[RequestResult]
    load: list[LoadSample] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    def write_csv(self, path: str | Path) -> Path:
        """Write one row per request (every :class:`RequestResult` field) to ``path``.

        Returns:
            The path written.
        """
        p = Path(path)
        names = [f.name for f in fields(RequestResult)]
        with p.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(names)
            for r in self.requests:
                w.writerow([getattr(r, n) for n in names])
        return p

    def summary(self, ttft_slo_s: float, tbt_slo_s: float) -> Summary:
        """Aggregate the per-request results.

        Args:
            ttft_slo_s: TTFT SLO for goodput.
            tbt_slo_s: TBT SLO for goodput.
        """
        reqs = self.requests
        served = [r for r in reqs if not r.rejected]
        ttft = np.array([r.ttft_s for r in served], dtype=float)
        tbt = np.array([r.tbt_s for r in served if not math.isnan(r.tbt_s)], dtype=float)
        reasons: dict[str, int] = {}
        for r in reqs:
            if r.rejected:
                reasons[r.reason] = reasons.get(r.reason, 0) + 1
        # Complete blocks only: a partial tail block is never cached (hashing rule).
        blocks = sum(r.input_length // 512 for r in served)
        hits = sum(r.prefix_hit_blocks for r in served)
        local = sum(r.local_hit_blocks for r in served)
        good = sum(
            1
            for r in served
            if r.ttft_s <= ttft_slo_s and (math.isnan(r.tbt_s) or r.tbt_s <= tbt_slo_s)
        )
        start = min((r.arrival_s for r in reqs), default=0.0)
        end = max((r.finish_s for r in served if not math.isnan(r.finish_s)), default=start)
        span = max(end - start, 1e-9)

        def pct(a: np.ndarray, q: float) -> float:
            return float(np.percentile(a, q)) if a.size else math.nan

        rel = [
            e
            for r in served
            if not math.isnan(r.predicted_ttft_s)
            and (e := relative_error(r.predicted_ttft_s, r.ttft_s)) is not None
        ]
        err = np.array(rel, dtype=float)

        return Summary(
            requests=len(reqs),
            served=len(served),
            rejected=len(reqs) - len(served),
            rejected_by_reason=dict(sorted(reasons.items())),
            wasted_prefills=sum(1 for r in reqs if r.wasted_prefill),
            avg_ttft_s=float(ttft.mean()) if ttft.size else math.nan,
            p50_ttft_s=pct(ttft, 50),
            p90_ttft_s=pct(ttft, 90),
            p99_ttft_s=pct(ttft, 99),
            avg_tbt_s=float(tbt.mean()) if tbt.size else math.nan,
            p90_tbt_s=pct(tbt, 90),
            hit_rate=hits / blocks if blocks else 0.0,
            local_hit_rate=local / blocks if blocks else 0.0,
            transferred_gb=sum(r.transferred_bytes for r in reqs) / 1e9,
            goodput_rps=good / span,
            slo_attainment=good / len(reqs) if reqs else 0.0,
            makespan_s=span,
            ttft_err_p50=pct(err, 50),
            ttft_err_p90=pct(err, 90),
            ttft_err_mean=float(err.mean()) if err.size else math.nan,
        )
