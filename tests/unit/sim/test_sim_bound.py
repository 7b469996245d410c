"""The no-queue lower bound of the average TTFT, exactly, on a tiny hand-written trace."""

from __future__ import annotations

import math

import pytest

from mooncake_core.sim import (
    SimConfig,
    TraceRequest,
    load_profile,
    lower_bound_avg_ttft,
    lower_bound_ttfts,
    set_field,
    simulate,
)

PROFILE = "llama3_70b_a800"


def T(n: int, p: int) -> float:
    """The profile's prefill time, written out: c0 + new*(c1 + c2*p + c3*new)."""
    c0, c1, c2, c3 = load_profile(PROFILE).prefill.coefficients
    new = n - p
    return c0 + new * (c1 + c2 * p + c3 * new)


# Block size 512: input // 512 complete blocks can be reused.
TRACE = [
    TraceRequest(0, 0.0, 1100, 5, (1, 2, 3)),  # keys (1, 2): nothing seen yet
    TraceRequest(1, 100.0, 1536, 5, (1, 2, 4)),  # (1, 2) seen: 1024 cached
    TraceRequest(2, 200.0, 600, 5, (5, 6)),  # key (5,): new
    TraceRequest(3, 300.0, 1024, 5, (1, 2)),  # whole prompt seen: clamped, c0 only
    TraceRequest(4, 400.0, 1100, 5, (9, 2, 4)),  # first key new: no prefix, even if later seen
]


def test_bound_per_request_exact() -> None:
    want = [T(1100, 0), T(1536, 1024), T(600, 0), T(1024, 1024), T(1100, 0)]
    got = lower_bound_ttfts(TRACE, PROFILE)
    assert got == pytest.approx(want, rel=1e-12, abs=0)
    assert got[3] == pytest.approx(load_profile(PROFILE).prefill.coefficients[0], rel=1e-12)
    assert lower_bound_avg_ttft(TRACE, PROFILE) == pytest.approx(math.fsum(want) / 5, rel=1e-12)
    assert math.isnan(lower_bound_avg_ttft([], PROFILE))


def test_bound_follows_ground_truth_speed_and_overhead() -> None:
    cfg = SimConfig(
        prefill_instances=4,
        profile=PROFILE,
        truth_prefill_scale=2.0,
        truth_prefill_spread=0.25,  # fastest instance: 2.0 * 0.75 = 1.5x the profile
        truth_overhead_s=0.5,
    )
    base = lower_bound_ttfts(TRACE, PROFILE)
    assert lower_bound_ttfts(TRACE, cfg) == pytest.approx([1.5 * t + 0.5 for t in base], rel=1e-12)


def test_bound_with_cpp_takes_the_fastest_usable_prefix() -> None:
    # 5 blocks, 2 of them seen. Group of 2 splits a prefill with >= 2 x 1024 new tokens
    # over the group at 90% efficiency: reusing 1 block (2048 new, split) is faster than
    # reusing 2 (1536 new, not split) or none (2560 new, split).
    seen = TraceRequest(0, 0.0, 1024, 5, (1, 2))
    req = TraceRequest(1, 10.0, 2560, 5, (1, 2, 3, 4, 5))
    cfg = SimConfig(prefill_instances=4, cpp_group=2, profile=PROFILE)
    split = 2 * load_profile(PROFILE).cpp_efficiency
    options = {"none": T(2560, 0) / split, "one": T(2560, 512) / split, "two": T(2560, 1024)}
    assert min(options, key=options.__getitem__) == "one"
    assert lower_bound_ttfts([seen, req], cfg)[1] == pytest.approx(options["one"], rel=1e-12)


def test_one_idle_instance_with_every_prefix_reaches_the_bound() -> None:
    # Arrivals 100 s apart on one prefill instance: no queue, every prefix is local, so
    # the simulated TTFT of each request is exactly its bound.
    cfg = SimConfig(prefill_instances=1, decode_instances=1, simulate_decode=False)
    for policy in ("kvcache_centric", "adaptive"):
        res = simulate(TRACE, set_field(cfg, "conductor.policy", policy))
        ttfts = [r.ttft_s for r in sorted(res.requests, key=lambda r: r.rid)]
        assert ttfts == pytest.approx(lower_bound_ttfts(TRACE, cfg), rel=1e-9)
