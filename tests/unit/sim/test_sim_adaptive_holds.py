"""Adaptive holds against kvcache_centric on traces of shapes it was never tuned on.

Three synthetic shapes, generated here (nothing is fitted to them or to the public
trace): multi-turn sessions, a few hot long documents with bursty arrivals, and a mix
of long one-off prompts with short ones behind a shared system prompt. Each runs on
16P+16D with one 10 Gbps link per node and decode KV streaming on the NICs (contention
the Conductor's network model does not fully see), and with 100 Gbps links, TTFT only.
A third cell is an overloaded 4P cluster. Criterion of issue 20: adaptive's average TTFT
is never more than 2% above kvcache_centric's. Before the guarded choice, this test failed
on the documents shape in the overloaded cell: adaptive 9.535 s vs 9.337 s (+2.1%; in
another draw of the same shape +5.7%, 11.617 vs 10.993 s, from two decisions changed by a
transfer correction of 0.45). An intermediate guard that let the learned model alone pick
any plan that does not fetch more was 10.7% worse on sessions there (0.297 vs 0.269 s).
Now the documents cell is 9.337 s for both, and over every cell we ran by hand (rates
6-24/s, 4 and 16 instances, 10 and 100 Gbps, decode on and off) adaptive lies between
-81% and +1.0% of kvcache_centric.
"""

from __future__ import annotations

import random

import pytest

from mooncake_core.sim import SimConfig, TraceRequest, set_field, simulate

BLOCK = 512


def _req(i: int, t: float, keys: list[int], rng: random.Random) -> TraceRequest:
    return TraceRequest(
        i, t, len(keys) * BLOCK + rng.randint(0, 511), rng.randint(1, 300), tuple(keys)
    )


def sessions(n: int, rate: float, seed: int) -> list[TraceRequest]:
    """Multi-turn chats: a turn extends a recent session's prefix by 1-6 fresh blocks."""
    rng = random.Random(seed)
    live: list[list[int]] = []
    fresh, t, out = 0, 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        if live and rng.random() < 0.7:
            s = rng.choice(live[-30:])
        else:
            s = [0, 1] if rng.random() < 0.5 else []
            live.append(s)
        for _ in range(rng.randint(1, 6)):
            fresh += 1
            s.append(1000 + fresh)
        out.append(_req(i, t, s, rng))
    return out


def documents(n: int, rate: float, seed: int) -> list[TraceRequest]:
    """12 documents of 10-60 blocks, Zipf popularity, 20 s on/off bursts, short questions."""
    rng = random.Random(seed)
    docs = [[100_000 * (d + 1) + b for b in range(rng.randint(10, 60))] for d in range(12)]
    weights = [1 / (k + 1) for k in range(len(docs))]
    fresh, t, out = 0, 0.0, []
    for i in range(n):
        burst = int(t / 20) % 2 == 0
        t += rng.expovariate(rate * (1.6 if burst else 0.4))
        q = []
        for _ in range(rng.randint(1, 3)):
            fresh += 1
            q.append(fresh)
        out.append(_req(i, t, rng.choices(docs, weights)[0] + q, rng))
    return out


def mixed(n: int, rate: float, seed: int) -> list[TraceRequest]:
    """Half long one-off prompts (1-40 blocks), half short; 60% behind a 4-block system prompt."""
    rng = random.Random(seed)
    fresh, t, out = 0, 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        k = rng.randint(1, 40) if rng.random() < 0.5 else rng.randint(1, 4)
        q = []
        for _ in range(k):
            fresh += 1
            q.append(fresh)
        out.append(_req(i, t, ([7, 8, 9, 10] if rng.random() < 0.6 else []) + q, rng))
    return out


SHAPES = {"sessions": sessions, "documents": documents, "mixed": mixed}


def avg_ttft(
    trace: list[TraceRequest], policy: str, instances: int, gbps: float, decode: bool
) -> float:
    cfg = SimConfig(
        prefill_instances=instances,
        decode_instances=instances,
        simulate_decode=decode,
        node_bandwidth_bps=gbps * 1e9 / 8,
    )
    res = simulate(trace, set_field(cfg, "conductor.policy", policy))
    return res.summary(cfg.conductor.ttft_slo_s, cfg.conductor.tbt_slo_s).avg_ttft_s


CELLS = [
    # (prefill instances, Gbps per node, decode on the NICs, requests/s)
    (16, 10.0, True, 24.0),  # NIC contention the network model does not fully see
    (16, 100.0, False, 24.0),
    (4, 100.0, False, 12.0),  # overloaded: queues of seconds, documents shape at 11 s TTFT
]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize(("instances", "gbps", "decode", "rate"), CELLS)
def test_adaptive_within_2pct_of_kvcache_centric(
    shape: str, instances: int, gbps: float, decode: bool, rate: float
) -> None:
    trace = SHAPES[shape](500, rate, seed=1)
    kvc = avg_ttft(trace, "kvcache_centric", instances, gbps, decode)
    ada = avg_ttft(trace, "adaptive", instances, gbps, decode)
    assert ada <= kvc * 1.02, (
        f"{shape} {instances}P {gbps} Gbps decode={decode}: {ada:.3f} s vs {kvc:.3f} s"
    )
