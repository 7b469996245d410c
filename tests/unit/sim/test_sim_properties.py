"""Determinism for a seed, and the unlimited-cache hit rate as a property of the data."""

import random
from pathlib import Path

import pytest

from mooncake_core.sim import SimConfig, TraceRequest, load_trace, set_field, simulate

TRACE = Path("/work/shared/traces/conversation_trace.jsonl")


def synthetic(n: int, seed: int) -> list[TraceRequest]:
    """Multi-turn sessions: each turn extends its session's prefix by fresh blocks."""
    rng = random.Random(seed)
    sessions: list[list[int]] = []
    fresh = 0
    out = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(2.0)
        if sessions and rng.random() < 0.6:
            s = rng.choice(sessions)
        else:
            s = [0] if rng.random() < 0.5 else []  # a shared "system prompt" block
            sessions.append(s)
        for _ in range(rng.randint(1, 6)):
            fresh += 1
            s.append(1000 + fresh)
        blocks = tuple(s)
        tail = rng.randint(0, 511)
        out.append(TraceRequest(i, t, len(blocks) * 512 + tail, rng.randint(1, 40), blocks))
    return out


def seen_before_fraction(trace: list[TraceRequest]) -> float:
    """Independent of the simulator: a plain set over complete-block ids in arrival order."""
    seen: set[int] = set()
    hits = total = 0
    for r in trace:
        ids = r.hash_ids[: r.input_length // 512]
        total += len(ids)
        hits += sum(1 for h in ids if h in seen)
        seen.update(ids)
    return hits / total


def fingerprint(policy: str, seed: int, trace: list[TraceRequest]) -> list[tuple]:
    cfg = set_field(
        SimConfig(prefill_instances=4, decode_instances=2, seed=seed), "conductor.policy", policy
    )
    res = simulate(trace, cfg)
    return [(r.prefill_instance, r.ttft_s, r.tbt_s, r.prefix_hit_blocks) for r in res.requests]


@pytest.mark.parametrize("policy", ["random", "kvcache_centric", "adaptive"])
def test_same_seed_same_run(policy: str) -> None:
    trace = synthetic(300, seed=1)
    assert fingerprint(policy, 7, trace) == fingerprint(policy, 7, trace)


def test_random_policy_depends_on_seed() -> None:
    trace = synthetic(300, seed=1)
    assert fingerprint("random", 1, trace) != fingerprint("random", 2, trace)


def unlimited_hit_rate(trace: list[TraceRequest]) -> float:
    # One FIFO instance: every request starts after all earlier ones finished, so an
    # unlimited cache holds exactly the blocks of every earlier request.
    cfg = SimConfig(
        prefill_instances=1, decode_instances=1, local_cache_tokens=-1, simulate_decode=False
    )
    res = simulate(trace, set_field(cfg, "conductor.policy", "cache_aware"))
    hits = sum(r.prefix_hit_blocks for r in res.requests)
    total = sum(r.input_length // 512 for r in res.requests)
    return hits / total


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_unlimited_cache_hit_rate_equals_data_synthetic(seed: int) -> None:
    trace = synthetic(400, seed)
    assert unlimited_hit_rate(trace) == pytest.approx(seen_before_fraction(trace), abs=1e-12)


@pytest.mark.skipif(not TRACE.exists(), reason="shared conversation trace not present")
def test_unlimited_cache_hit_rate_equals_data_conversation_trace() -> None:
    trace = load_trace(TRACE, sample="first:1500", speed=50.0)
    expected = seen_before_fraction(trace)
    assert expected > 0.1  # the property is not vacuous on this data
    assert unlimited_hit_rate(trace) == pytest.approx(expected, abs=1e-12)
