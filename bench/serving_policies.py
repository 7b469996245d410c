"""Live policy comparison: loadgen against a real cluster, kvcache_centric vs random.

For each policy a fresh cluster (master, 2 store nodes, conductor, 2 prefill, 1 decode,
default 4-layer model, small local caches) is started with the test helper in
tests/functional/serving, and the same prefix-heavy workload is replayed with
``mooncake_core.loadgen`` (the code behind ``mooncake loadgen``). Prints client-side
TTFT/TBT, prefix hit rate, rejections and goodput per policy.

    python bench/serving_policies.py [--requests 80] [--rate 4] [--prefixes 12]
    python bench/serving_policies.py --trace /work/shared/traces/conversation_trace.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/functional/serving"))
from serving_cluster import run_cluster

from mooncake_core.loadgen import (
    LoadOptions,
    run_load,
    scale_trace,
    synthetic_prefix_workload,
)

MODEL = {
    "name": "mooncake-tiny",
    "layers": 4,
    "hidden": 256,
    "heads": 8,
    "kv_heads": 2,
    "intermediate": 688,
    "max_seq_len": 4096,
    "seed": 0,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="+", default=["kvcache_centric", "random"])
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--prefixes", type=int, default=12)
    ap.add_argument("--prefix-tokens", type=int, default=768)
    ap.add_argument("--suffix-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--cache-blocks", type=int, default=400)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--divisor", type=int, default=16)
    ap.add_argument("--speed", type=float, default=1.0)
    args = ap.parse_args()
    if args.trace is not None:
        from mooncake_core.sim.trace import load_trace

        work = scale_trace(
            load_trace(args.trace, sample=f"first:{args.requests}"),
            divisor=args.divisor,
            max_input=3000,
            max_output=args.max_tokens,
        )
    else:
        work = synthetic_prefix_workload(
            args.requests,
            prefixes=args.prefixes,
            prefix_tokens=args.prefix_tokens,
            suffix_tokens=args.suffix_tokens,
            max_tokens=args.max_tokens,
            rate=args.rate,
            seed=1,
        )
    print(
        f"{len(work)} requests, mean prompt {sum(len(w.tokens) for w in work) / len(work):.0f} tokens"
    )
    print(
        f"{'policy':<16} {'done':>5} {'429':>4} {'err':>4} {'TTFT mean':>10} {'p50':>8} {'p90':>8} "
        f"{'p99':>8} {'TBT p50':>8} {'hit rate':>9} {'goodput':>8}"
    )
    for policy in args.policies:
        with (
            tempfile.TemporaryDirectory() as tmp,
            run_cluster(
                Path(tmp),
                prefill=2,
                decode=1,
                model=MODEL,
                cache_blocks=args.cache_blocks,
                decode_cache_blocks=4096,
                conductor={"policy": policy, "admission": "none"},
                max_batch=16,
            ) as cl,
        ):
            rep = asyncio.run(
                run_load(work, LoadOptions(url=cl.url, concurrency=32, speed=args.speed))
            )

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1e3:.0f}ms"

        print(
            f"{policy:<16} {rep.completed:>5} {rep.rejected:>4} {rep.errors:>4} "
            f"{ms(rep.ttft_mean_s):>10} {ms(rep.ttft_p50_s):>8} {ms(rep.ttft_p90_s):>8} "
            f"{ms(rep.ttft_p99_s):>8} {ms(rep.tbt_p50_s):>8} {rep.hit_rate:>9.1%} "
            f"{rep.goodput_rps:>7.2f}/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
