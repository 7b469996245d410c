"""Live serving benchmark: cached-prefix vs cold TTFT, and layer-wise store on vs off.

Starts a real cluster (master, 2 store nodes, conductor, 1 prefill, 1 decode; the default
4-layer model) with the test helper in tests/functional/serving, then:

1. reuse: for each length, a cold prompt (nothing cached) and a warm prompt of the same
   length whose first 90% is a prefix cached by an earlier request; client-side TTFT
   through the front door (POST /v1/completions, max_tokens 1), interleaved, medians;
2. layer-wise store: cold prompts sent straight to the prefill worker's Prefill RPC with
   store_kv on and off (KV still streamed to the decode worker), interleaved; the RPC's
   wall time (compute + waiting for the last writes), medians and minima.

    python bench/serving_ttft.py [--lengths 256 512 1000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/functional/serving"))
from serving_cluster import run_cluster

from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.rpc import worker_pb2_grpc as pbg

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


def ttft(url: str, tokens: list[int]) -> float:
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/completions", json={"prompt": tokens, "max_tokens": 1}, timeout=120)
    r.raise_for_status()
    return time.perf_counter() - t0


async def store_bench(cfg: dict, lengths: list[int], repeats: int, rng: random.Random) -> list:
    pre = pbg.WorkerStub(
        grpc.aio.insecure_channel(f"127.0.0.1:{cfg['prefill_workers'][0]['rpc_port']}")
    )
    dec = pbg.WorkerStub(
        grpc.aio.insecure_channel(f"127.0.0.1:{cfg['decode_workers'][0]['rpc_port']}")
    )
    rows = []
    n = 0
    for L in lengths:
        times: dict[bool, list[float]] = {True: [], False: []}
        stored = 0
        for _ in range(repeats):
            for on in (False, True) if n % 2 else (True, False):
                n += 1
                toks = [rng.randrange(256) for _ in range(L)]
                rid = f"sb-{n}"
                prep = await dec.Prepare(pb.PrepareRequest(request_id=rid, num_tokens=L))
                target = pb.DecodeTarget(
                    segment=prep.segment,
                    seq_id=prep.seq_id,
                    blocks=list(prep.blocks),
                    block_nbytes=prep.block_nbytes,
                    layer_nbytes=prep.layer_nbytes,
                )
                t0 = time.perf_counter()
                rep = await pre.Prefill(
                    pb.PrefillRequest(
                        request_id=rid,
                        tokens=toks,
                        sampling=pb.Sampling(max_tokens=1),
                        target=target,
                        store_kv=on,
                    )
                )
                times[on].append(time.perf_counter() - t0)
                stored = max(stored, rep.stored_blocks)
                await dec.Cancel(pb.CancelRequest(request_id=rid))
        on_m, off_m = statistics.median(times[True]), statistics.median(times[False])
        rows.append((L, stored, off_m, on_m, on_m / off_m, min(times[True]) / min(times[False])))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1000])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(0)
    with (
        tempfile.TemporaryDirectory() as tmp,
        run_cluster(Path(tmp), prefill=1, decode=1, model=MODEL, cache_blocks=2048) as cl,
    ):
        for _ in range(3):  # warm-up: connections, first Store puts
            ttft(cl.url, [rng.randrange(256) for _ in range(64)])
        print("reuse: client TTFT through the front door (max_tokens 1), medians")
        print(f"{'tokens':>7} {'cached':>7} {'cold':>9} {'warm':>9} {'warm/cold':>10}")
        for L in args.lengths:
            cold, warm = [], []
            for i in range(args.repeats):
                prefix = [rng.randrange(256) for _ in range(L * 9 // 10)]
                ttft(cl.url, [*prefix, 1])  # caches the prefix (whole blocks)
                tail = [rng.randrange(256) for _ in range(L - len(prefix))]
                fresh = [rng.randrange(256) for _ in range(L)]
                pair = [(warm, prefix + tail), (cold, fresh)]
                for bucket, toks in pair if i % 2 else pair[::-1]:
                    bucket.append(ttft(cl.url, toks))
            cm, wm = statistics.median(cold), statistics.median(warm)
            print(
                f"{L:>7} {len(prefix) // 16 * 16:>7} {cm * 1e3:>7.1f}ms {wm * 1e3:>7.1f}ms {wm / cm:>10.2f}"
            )
        rows = asyncio.run(store_bench(cl.config, args.lengths, args.repeats, rng))
        print(
            "\nlayer-wise store: Prefill RPC wall time, store_kv off vs on (KV streamed to decode)"
        )
        print(
            f"{'tokens':>7} {'blocks':>7} {'off':>9} {'on':>9} {'on/off med':>11} {'on/off min':>11}"
        )
        for L, blocks, off, on, r_med, r_min in rows:
            print(
                f"{L:>7} {blocks:>7} {off * 1e3:>7.1f}ms {on * 1e3:>7.1f}ms {r_med:>11.2f} {r_min:>11.2f}"
            )


if __name__ == "__main__":
    main()
