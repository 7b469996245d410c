"""200 concurrent clients against a decode worker with a small KV pool.

An admitted request must never fail later for lack of decode KV: every request either
completes or is refused up front (HTTP 429, outcome ``rejected`` in the audit). Before
the fix, the decode worker reserved blocks for the prompt only; the blocks each
generated token needs were taken step by step, and when the pool ran dry one step
failed the whole batch with ``CacheFullError: need 1 blocks, 0 free``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serving_cluster import run_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

CLIENTS = 200
ROUNDS = 3  # each client sends this many requests one after the other (no back-off)
REQUESTS = CLIENTS * ROUNDS
MAX_TOKENS = 40
PROMPT_CHARS = 30  # 31 tokens with BOS: 2 blocks of 16; with 40 generated, 5 blocks
DECODE_BLOCKS = 20  # fewer than 8 (max_batch) x 5 blocks: the pool binds, not the slots


def _client(url: str, client: int, start: threading.Barrier) -> list[tuple[int, str]]:
    start.wait()
    return [_post(url, f"c{client:03d} r{r} " + "x" * (PROMPT_CHARS - 8)) for r in range(ROUNDS)]


def _post(url: str, prompt: str) -> tuple[int, str]:
    body = json.dumps({"prompt": prompt, "max_tokens": MAX_TOKENS}).encode()
    req = urllib.request.Request(
        url + "/v1/completions", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:  # connection refused/reset: counted as "other"
        return -1, f"{type(exc).__name__}: {exc}"


def _classify(status: int, text: str) -> str:
    if status == 200:
        return "completed"
    if status == 429:
        return "rejected"
    if "CacheFullError" in text or "blocks, 0 free" in text:
        return "capacity_failure"
    return f"other_{status}"


def test_admitted_requests_never_fail_for_decode_kv(tmp_path: Path) -> None:
    """0 mid-decode capacity failures from 200 concurrent clients; all complete or get a 429."""
    with run_cluster(
        tmp_path, prefill=1, decode=1, decode_cache_blocks=DECODE_BLOCKS, max_batch=8
    ) as cl:
        start = threading.Barrier(CLIENTS)
        t0 = time.monotonic()
        with ThreadPoolExecutor(CLIENTS) as pool:
            per_client = list(pool.map(lambda c: _client(cl.url, c, start), range(CLIENTS)))
        results = [r for rs in per_client for r in rs]
        elapsed = time.monotonic() - t0
        kinds = Counter(_classify(s, t) for s, t in results)
        examples = {_classify(s, t): t[:300] for s, t in results if _classify(s, t) != "completed"}
        print(f"\n{CLIENTS} clients, {REQUESTS} requests in {elapsed:.1f}s: {dict(kinds)}")
        print(f"examples: {examples}")
        health = json.loads(urllib.request.urlopen(cl.url + "/health", timeout=10).read())
        print(f"front door: {health['front_door']}")
        # The audit tells the same story: no decided request failed.
        db = Path(cl.config["state_dir"]) / "audit.db"
        deadline = time.monotonic() + 20
        outcomes: Counter[str] = Counter()
        while time.monotonic() < deadline:
            with sqlite3.connect(db) as con:
                outcomes = Counter(
                    str(o) for (o,) in con.execute("select outcome from decisions").fetchall()
                )
            if sum(outcomes.values()) >= REQUESTS and "None" not in outcomes:
                break
            time.sleep(0.2)
        print(f"audit outcomes: {dict(outcomes)}")
    assert kinds["capacity_failure"] == 0, examples
    assert set(kinds) <= {"completed", "rejected"}, examples
    assert kinds["completed"] > 0
    assert kinds["completed"] + kinds["rejected"] == REQUESTS
    assert outcomes["failed"] == 0, outcomes
    assert outcomes["completed"] == kinds["completed"]
    assert outcomes["completed"] + outcomes["rejected"] == REQUESTS, outcomes
