"""Outcomes through the real front door: a cluster of real processes (conductor, one
prefill and one decode worker, no store) serves requests that end in every way, and the
conductor's audit database file says how each one ended.

- completed: a short request;
- rejected by admission (HTTP 429 ``decode_full``): the only decode slot is taken;
- rejected after admission (HTTP 429 ``decode_kv_full``): the prompt needs more KV
  blocks than the decode pool has (Prepare answers RESOURCE_EXHAUSTED);
- failed: the decode worker is SIGKILLed after the first streamed token (the client
  gets an SSE error event). A prompt that does not fit ``max_seq_len`` is refused
  with 400 before scheduling and has no decision row;
- cancelled: a streaming client goes away after the first token.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving_cluster import TINY_MODEL, Cluster, run_cluster
from typer.testing import CliRunner

from mooncake_cli.main import app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BLOCK = 16
DECODE_BLOCKS = 40  # 640 tokens of decode KV
MAX_SEQ = TINY_MODEL["max_seq_len"]  # 1024
# The Conductor knows the decode pool (640 tokens) and admits this prompt; the worker's
# Prepare also reserves the blocks of every token to generate (KV_FULL_MAX_TOKENS): more
# than the pool holds, so the request is admitted, then rejected with 429 at Prepare.
KV_FULL_TOKENS = DECODE_BLOCKS * BLOCK - 24
KV_FULL_MAX_TOKENS = 64
TOO_LONG_TOKENS = MAX_SEQ + 6  # does not fit the model


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("audit_outcome")
    # early_reject judges the decode load now: with one decode slot (max_batch 1) taken,
    # the next request is rejected before prefill. The conductor counts slots, not KV
    # blocks, so a prompt larger than the decode pool is admitted and refused at Prepare.
    with run_cluster(
        tmp,
        with_store=False,
        prefill=1,
        decode=1,
        max_batch=1,
        block_size=BLOCK,
        decode_cache_blocks=DECODE_BLOCKS,
        conductor={"admission": "early_reject"},
    ) as cl:
        yield cl


def _post(cl: Cluster, prompt: Any, max_tokens: int = 2) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": max_tokens}
    return httpx.post(cl.url + "/v1/completions", json=body, timeout=60)


def _rows(db: Path) -> dict[str, tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        q = (
            "select request_id, prompt_tokens, admitted, outcome, outcome_detail, actual_ttft_s "
            "from decisions order by id"
        )
        return {r[0]: r for r in con.execute(q)}


def _stream_then_kill_decode(cl: Cluster) -> str:
    """Start a long stream, SIGKILL the decode worker after its first token; its id."""
    body = {"prompt": "fail me", "max_tokens": 500, "stream": True}
    deadline = time.monotonic() + 20
    with httpx.Client(timeout=60) as c:
        while True:  # the cancelled stream's slot is given back a moment after it ends
            resp = c.send(
                c.build_request("POST", cl.url + "/v1/completions", json=body), stream=True
            )
            if resp.status_code == 200 or time.monotonic() > deadline:
                break
            resp.close()
            time.sleep(0.2)
        try:
            assert resp.status_code == 200, resp.read()
            request_id = resp.headers["X-Request-Id"]
            lines = resp.iter_lines()
            next(lines)
            cl.procs["decode-0"].kill()
            rest = "\n".join(lines)
            assert "error" in rest, rest[-500:]
        finally:
            resp.close()
    return request_id


def test_every_way_a_request_ends_is_in_the_audit_file(cluster: Cluster) -> None:
    # completed
    r = _post(cluster, "hello audit")
    assert r.status_code == 200, r.text
    done_id = r.json()["id"]

    # admitted, then 429 at Prepare: the decode pool is too small for prompt + output
    r = _post(cluster, [65] * KV_FULL_TOKENS, KV_FULL_MAX_TOKENS)
    assert r.status_code == 429, r.text
    assert r.json()["error"]["message"].startswith("decode_kv_full")

    # a prompt the model cannot hold is refused before any scheduling (no decision)
    r = _post(cluster, [66] * TOO_LONG_TOKENS)
    assert r.status_code == 400 and "max_seq_len" in r.text, r.text

    # a stream holds the only decode slot: the next request is rejected by admission;
    # then the client goes away mid-stream
    with httpx.Client(timeout=60) as c:
        req = c.build_request(
            "POST",
            cluster.url + "/v1/completions",
            json={"prompt": "hold the slot", "max_tokens": 500, "stream": True},
        )
        resp = c.send(req, stream=True)
        try:
            assert resp.status_code == 200
            held_id = resp.headers["X-Request-Id"]
            lines = resp.iter_lines()  # keep it: dropping the iterator closes the stream
            next(lines)
            probe = _post(cluster, "one more")
            db = Path(cluster.config["state_dir"]) / "audit.db"
            assert probe.status_code == 429, (probe.text, _rows(db))
            assert probe.json()["error"]["message"].startswith("decode_full")
        finally:
            resp.close()

    # admitted, then failed: the decode worker dies after the first streamed token
    failed_id = _stream_then_kill_decode(cluster)

    db = Path(cluster.config["state_dir"]) / "audit.db"
    deadline = time.monotonic() + 15
    rows: dict[str, tuple[Any, ...]] = {}
    while time.monotonic() < deadline:
        rows = _rows(db)
        if len(rows) == 5 and all(row[3] is not None for row in rows.values()):
            break
        time.sleep(0.2)  # the writer flushes every flush_interval_s
    by_len = {row[1]: row for row in rows.values()}
    assert len(rows) == 5, rows

    done = rows[done_id]
    assert (done[2], done[3], done[4]) == (1, "completed", None)
    assert done[5] is not None and done[5] > 0

    kv_full = by_len[KV_FULL_TOKENS]
    assert (kv_full[2], kv_full[3]) == (1, "rejected")
    assert kv_full[4].startswith("decode_kv_full: RESOURCE_EXHAUSTED")

    failed = rows[failed_id]
    assert (failed[2], failed[3]) == (1, "failed")
    assert "decode" in failed[4], failed[4]

    held = rows[held_id]
    assert (held[2], held[3]) == (1, "cancelled")

    (refused,) = [row for row in rows.values() if row[2] == 0]
    assert refused[3] == "rejected" and refused[4].startswith("decode_full: ")

    # The CLI reads the same file.
    url = f"sqlite:///{db}"
    cli = CliRunner()
    res = cli.invoke(app, ["audit", "ls", "--url", url, "--outcome", "failed", "--json"])
    assert res.exit_code == 0, res.output
    assert [d["request_id"] for d in json.loads(res.stdout)] == [failed[0]]
    res = cli.invoke(app, ["audit", "stats", "--url", url, "--bucket", "1h", "--json"])
    assert res.exit_code == 0, res.output
    total = json.loads(res.stdout)["total"]
    assert {k: v for k, v in total.items() if k.startswith("outcome_")} == {
        "outcome_completed": 1,
        "outcome_rejected": 2,
        "outcome_rejected_late": 1,
        "outcome_failed": 1,
        "outcome_cancelled": 1,
        "outcome_unknown": 0,
    }
    res = cli.invoke(app, ["audit", "explain", done_id, "--url", url])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().endswith("It completed: every token was delivered.")
