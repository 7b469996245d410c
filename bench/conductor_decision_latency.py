"""Conductor decision latency: p50/p99 of ``Conductor.schedule`` in pure Python.

Setup per row: N prefill and N decode instances, 4 store nodes, and an index preloaded
with 100,000 distinct block keys (4,000 prefix chains of 25 blocks of 512 tokens, each
replicated on 1-3 prefill instances with a random cached length and on one store node).
Requests pick a chain with a Zipf-like skew, reuse 5-25 of its blocks and add 0-4 new
ones (12k tokens on average, like the conversation trace). Requests complete in FIFO
order so that about 4 are queued per prefill instance. Only ``schedule()`` is timed.

Both wall time and thread CPU time are reported: on a shared machine the wall p99 is
dominated by preemption, the CPU p99 is the decision's own cost. ``--gc-freeze`` moves
the preloaded index out of the garbage collector's generations (what a long-running
service does after loading), so collections do not walk 100k entries.

Run: ``python bench/conductor_decision_latency.py [--decisions 5000] [--gc-freeze]``
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections import deque

from mooncake_core.conductor import (
    BlockStored,
    Conductor,
    ConductorOptions,
    ScheduleRequest,
    Tier,
)
from mooncake_core.config.models import ConductorConfig, HashingConfig

CHAINS = 4000
CHAIN_LEN = 25
BLOCK = 512


def build(n: int, policy: str, seed: int) -> tuple[Conductor, list[list[int]]]:
    rng = random.Random(seed)
    prefill = [f"p{i}" for i in range(n)]
    c = Conductor(
        ConductorConfig(
            policy=policy, admission="early_reject_predictive", ttft_slo_s=86_400, tbt_slo_s=86_400
        ),  # type: ignore[arg-type]
        prefill,
        {f"d{i}": 64 for i in range(n)},
        hashing=HashingConfig(block_size=BLOCK),
        options=ConductorOptions(seed=seed),
    )
    chains = []
    key = 1
    for _ in range(CHAINS):
        chain = list(range(key, key + CHAIN_LEN))
        key += CHAIN_LEN
        chains.append(chain)
        for inst in rng.sample(prefill, rng.randint(1, min(3, n))):
            c.apply(BlockStored(inst, Tier.HBM, tuple(chain[: rng.randint(1, CHAIN_LEN)])))
        c.apply(BlockStored(f"store-{rng.randrange(4)}", Tier.DRAM, tuple(chain)))
    assert c.index.snapshot().distinct_blocks == CHAINS * CHAIN_LEN
    return c, chains


def run(
    n: int, policy: str, decisions: int, seed: int, freeze: bool
) -> tuple[list[float], list[float], int]:
    c, chains = build(n, policy, seed)
    if freeze:
        gc.collect()
        gc.freeze()
    rng = random.Random(seed + 1)
    weights = [1.0 / (i + 1) for i in range(CHAINS)]
    picks = rng.choices(range(CHAINS), weights=weights, k=decisions)
    fresh = 10**9
    inflight: deque[str] = deque()
    lat: list[float] = []
    cpu: list[float] = []
    now = 0.0
    for i, chain_i in enumerate(picks):
        reuse = rng.randint(5, CHAIN_LEN)
        extra = rng.randint(0, 4)
        keys = (*chains[chain_i][:reuse], *range(fresh, fresh + extra))
        fresh += extra
        request = ScheduleRequest(f"r{i}", keys, len(keys) * BLOCK + 100, 300)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        d = c.schedule(request, now)
        lat.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        now += 0.05
        if d.admitted:
            inflight.append(request.request_id)
        while len(inflight) > 4 * n:
            rid = inflight.popleft()
            c.on_prefill_start(rid, now)
            c.on_prefill_done(rid, now)
            c.on_decode_join(rid, now)
            c.on_decode_done(rid, now)
    if freeze:
        gc.unfreeze()
    return lat, cpu, c.index.snapshot().distinct_blocks


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=5000)
    ap.add_argument("--instances", type=int, nargs="+", default=[16, 128])
    ap.add_argument(
        "--policies",
        nargs="+",
        default=["kvcache_centric", "adaptive", "cache_aware", "round_robin"],
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after loading the index")
    args = ap.parse_args()
    print(
        f"{'policy':<16} {'prefill':>7} {'blocks':>7} {'wall p50':>9} {'wall p99':>9} "
        f"{'cpu p50':>8} {'cpu p99':>8} {'cpu mean':>8}   (microseconds)"
    )
    for n in args.instances:
        for policy in args.policies:
            lat, cpu, blocks = run(n, policy, args.decisions, args.seed, args.gc_freeze)
            skip = len(lat) // 10  # drop the first 10%: warm-up
            w, c = lat[skip:], cpu[skip:]
            print(
                f"{policy:<16} {n:>7} {blocks:>7} {pct(w, 0.5) * 1e6:>9.1f} {pct(w, 0.99) * 1e6:>9.1f} "
                f"{pct(c, 0.5) * 1e6:>8.1f} {pct(c, 0.99) * 1e6:>8.1f} {statistics.fmean(c) * 1e6:>8.1f}"
            )


if __name__ == "__main__":
    main()
