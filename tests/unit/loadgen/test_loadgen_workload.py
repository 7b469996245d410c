"""Workload scaling and report arithmetic of the load generator."""

from __future__ import annotations

import itertools

import pytest

from mooncake_core.loadgen import RequestResult, percentile, scale_trace, summarize
from mooncake_core.loadgen.workload import synthetic_prefix_workload
from mooncake_core.sim.trace import TraceRequest


def test_loadgen_scaled_trace_shares_exactly_the_common_hash_prefix() -> None:
    reqs = [
        TraceRequest(0, 0.0, 1536, 64, (1, 2, 3)),
        TraceRequest(1, 0.5, 1536, 64, (1, 2, 9)),
        TraceRequest(2, 1.0, 1024, 640, (7, 8)),
    ]
    a, b, c = scale_trace(reqs, divisor=32, max_output=16)
    assert (len(a.tokens), len(b.tokens), len(c.tokens)) == (48, 48, 32)
    assert a.tokens[:32] == b.tokens[:32]  # hash ids 1, 2 -> 16 tokens each
    assert a.tokens[32:] != b.tokens[32:]
    assert a.tokens[:16] != c.tokens[:16]
    assert (a.max_tokens, c.max_tokens) == (2, 16)  # 64/32, and 640/32 capped at 16
    assert scale_trace(reqs, divisor=32) == scale_trace(reqs, divisor=32)  # deterministic


def test_loadgen_scale_trace_rejects_a_divisor_that_splits_blocks_unevenly() -> None:
    with pytest.raises(ValueError, match="divide 512"):
        scale_trace([], divisor=3)


def test_loadgen_synthetic_workload_reuses_a_few_prefixes() -> None:
    w = synthetic_prefix_workload(20, prefixes=2, prefix_tokens=64, suffix_tokens=8, seed=1)
    heads = {r.tokens[:64] for r in w}
    assert len(heads) == 2 and all(len(r.tokens) == 72 for r in w)
    assert all(b.arrival_s > a.arrival_s for a, b in itertools.pairwise(w))


def test_loadgen_summary_counts_slo_hits_rejections_and_hit_rate() -> None:
    res = [
        RequestResult(0, "ok", 100, 0.5, (1.0, 1.1, 1.2), cached_tokens=50),
        RequestResult(1, "ok", 100, 2.0, (3.0, 3.5), cached_tokens=0),  # TTFT misses 1 s SLO
        RequestResult(2, "rejected", 100),
        RequestResult(3, "error", 100),
    ]
    rep = summarize(res, wall_s=2.0, ttft_slo_s=1.0, tbt_slo_s=0.2)
    assert (rep.requests, rep.completed, rep.rejected, rep.errors) == (4, 2, 1, 1)
    assert rep.hit_rate == pytest.approx(0.25)
    assert rep.slo_met == 1 and rep.goodput_rps == pytest.approx(0.5)
    assert rep.ttft_mean_s == pytest.approx(1.25)
    assert res[1].tbt_s == pytest.approx(0.5)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([], 50) is None
