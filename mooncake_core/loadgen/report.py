"""Per-request results and the load report (percentiles, hit rate, goodput)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LoadReport", "RequestResult", "percentile", "summarize"]


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What one request got.

    Attributes:
        rid: workload position.
        status: ``ok``, ``rejected`` (429), ``error`` or ``http_<code>``.
        prompt_tokens: prompt length.
        ttft_s: client-side time to the first token.
        token_times: client-side arrival of each token (perf_counter seconds).
        cached_tokens: prompt tokens the server reused from a cache.
    """

    rid: int
    status: str
    prompt_tokens: int
    ttft_s: float | None = None
    token_times: tuple[float, ...] = ()
    cached_tokens: int = 0

    @property
    def tbt_s(self) -> float | None:
        """Mean of the worst 10% token intervals (the SLO's definition)."""
        gaps = sorted((b - a for a, b in itertools.pairwise(self.token_times)), reverse=True)
        if not gaps:
            return None
        k = max(1, len(gaps) // 10)
        return sum(gaps[:k]) / k


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` in [0, 100] (None for no values)."""
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


@dataclass(frozen=True, slots=True)
class LoadReport:
    """Summary of a run (seconds; ``None`` where nothing was measured)."""

    requests: int
    completed: int
    rejected: int
    errors: int
    wall_s: float
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tbt_mean_s: float | None
    tbt_p50_s: float | None
    tbt_p90_s: float | None
    tbt_p99_s: float | None
    hit_rate: float
    goodput_rps: float
    slo_met: int
    statuses: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for ``--json``)."""
        return asdict(self)


def summarize(
    results: Sequence[RequestResult], wall_s: float, ttft_slo_s: float, tbt_slo_s: float
) -> LoadReport:
    """Aggregate per-request results."""
    ok = [r for r in results if r.status == "ok"]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tbts = [t for r in ok if (t := r.tbt_s) is not None]
    prompt = sum(r.prompt_tokens for r in ok)
    met = sum(
        1
        for r in ok
        if r.ttft_s is not None
        and r.ttft_s <= ttft_slo_s
        and (r.tbt_s is None or r.tbt_s <= tbt_slo_s)
    )
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1

    def mean(v: list[float]) -> float | None:
        return sum(v) / len(v) if v else None

    return LoadReport(
        requests=len(results),
        completed=len(ok),
        rejected=statuses.get("rejected", 0),
        errors=len(results) - len(ok) - statuses.get("rejected", 0),
        wall_s=wall_s,
        ttft_mean_s=mean(ttfts),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p90_s=percentile(ttfts, 90),
        ttft_p99_s=percentile(ttfts, 99),
        tbt_mean_s=mean(tbts),
        tbt_p50_s=percentile(tbts, 50),
        tbt_p90_s=percentile(tbts, 90),
        tbt_p99_s=percentile(tbts, 99),
        hit_rate=sum(r.cached_tokens for r in ok) / prompt if prompt else 0.0,
        goodput_rps=met / wall_s if wall_s > 0 else 0.0,
        slo_met=met,
        statuses=statuses,
    )
