"""The no-queue lower bound of the average TTFT: what no scheduling policy can beat.

Every request is prefilled, the moment it arrives, on an idle instance that already
holds the longest prefix any earlier request of the trace wrote (an unlimited global
cache, free and instant transfers, no queue). Its TTFT is then its compute time alone,
plus the fixed overhead the simulated cluster adds outside the instance. A policy's
ratio to this bound says how much room any better policy could still have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mooncake_core.sim.config import SimConfig
from mooncake_core.sim.costmodel import CostModel, load_profile
from mooncake_core.sim.trace import TRACE_BLOCK_TOKENS, TraceRequest

__all__ = ["lower_bound_avg_ttft", "lower_bound_ttfts"]


def _fastest_factor(config: SimConfig) -> float:
    """The smallest ground-truth compute multiplier over the prefill instances."""
    if config.truth_prefill_scale == 1.0 and not config.truth_prefill_spread:
        return 1.0
    n = config.prefill_instances // config.cpp_group
    spread = config.truth_prefill_spread if n > 1 else 0.0
    return config.truth_prefill_scale * (1.0 - spread)


def _compute(cost: CostModel, input_len: int, hit_blocks: int, group: int) -> float:
    """Fastest compute time with a prefix of at most ``hit_blocks`` blocks reused.

    With CPP (``group > 1``) a shorter reused prefix can be faster (enough new tokens to
    split over the group), so the bound takes the minimum over every usable prefix.
    """
    tokens = min(hit_blocks * TRACE_BLOCK_TOKENS, input_len)
    best = cost.prefill_time(input_len, tokens, group)
    if group > 1:
        for n in range(hit_blocks):
            best = min(best, cost.prefill_time(input_len, n * TRACE_BLOCK_TOKENS, group))
    return best


def lower_bound_ttfts(
    trace: Sequence[TraceRequest], config: SimConfig | str = "llama3_70b_a800"
) -> list[float]:
    """Per-request no-queue lower bound of the TTFT, in trace order.

    Args:
        trace: the requests in arrival order.
        config: the simulated cluster (its profile, ``node_bandwidth_bps`` aside, CPP
            group, ground-truth compute speed and overhead), or just a profile name or
            path for a cluster whose ground truth is the profile.

    Returns:
        For each request: compute time with the longest prefix any earlier request
        wrote, on the fastest instance, plus ``truth_overhead_s``. The bound is exact
        for ``truth_prefill_noise`` 0 and holds in expectation otherwise (the noise has
        mean 1). It does not depend on replay speed, bandwidth or decode.
    """
    cfg = config if isinstance(config, SimConfig) else SimConfig(profile=config)
    cost = load_profile(cfg.profile)
    factor = _fastest_factor(cfg)
    seen: set[int] = set()
    out: list[float] = []
    for r in trace:
        keys = r.hash_ids[: r.input_length // TRACE_BLOCK_TOKENS]
        n = 0
        while n < len(keys) and keys[n] in seen:
            n += 1
        seen.update(keys)
        t = _compute(cost, r.input_length, n, cfg.cpp_group) * factor
        out.append(t + cfg.truth_overhead_s)
    return out


def lower_bound_avg_ttft(
    trace: Sequence[TraceRequest], config: SimConfig | str = "llama3_70b_a800"
) -> float:
    """Mean of :func:`lower_bound_ttfts` (``nan`` for an empty trace).

    Only comparable with a run in which every request is served (admission ``none``):
    a run that rejects requests averages over the served ones only.
    """
    ttfts = lower_bound_ttfts(trace, config)
    return math.fsum(ttfts) / len(ttfts) if ttfts else math.nan
