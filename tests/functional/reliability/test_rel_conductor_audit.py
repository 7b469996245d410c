"""The audit loses no decided request: the real conductor process, the real SQLite file.

- SIGTERM: every request the conductor answered has its decision row and its outcome
  once the process has exited (the writer flushes on the way out).
- SIGKILL under load: every request the conductor answered (a 200, or a 429 from
  admission) has its decision row, because the front door waits for the row to be
  committed before it dispatches or refuses the request. Before, the writer committed
  every ``flush_interval_s`` (0.5 s) and a SIGKILL lost the decisions of that window.

A request is matched to its row by the first block key of its prompt (each prompt is
unique within its first block), so 429s, which carry no request id, are checked too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from faults import kill9
from serving_cluster import Cluster, run_cluster

from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.config.models import HashingConfig
from mooncake_core.worker.tokenizer import ByteTokenizer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]

BLOCK = 16
HASHER = BlockHasher(HashingConfig(block_size=BLOCK, seed=0))
TOKENIZER = ByteTokenizer()


@dataclass(frozen=True, slots=True)
class Answer:
    """One request the conductor answered."""

    key: str  # hex of the prompt's first block key, as the audit stores it
    status: int
    request_id: str | None


def _key(prompt: str) -> str:
    return f"{HASHER.block_keys(TOKENIZER.encode(prompt))[0]:016x}"


def _prompt(tag: str) -> str:
    # BOS + 15 bytes make the first block: the tag must be unique within them.
    return f"{tag:<15.15}" + " and some more words"


def _post(url: str, prompt: str, max_tokens: int = 3) -> Answer | None:
    """POST one completion; ``None`` when no answer came (connection refused/reset)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(
        url + "/v1/completions", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return Answer(_key(prompt), r.status, json.loads(r.read())["id"])
    except urllib.error.HTTPError as exc:
        # The status came; its body may be cut by the kill (IncompleteRead).
        with contextlib.suppress(OSError, http.client.HTTPException):
            exc.read()
        return Answer(_key(prompt), exc.code, None)
    except (OSError, ValueError, http.client.HTTPException):  # no answer (cut mid-body too)
        return None


def _rows(cl: Cluster) -> dict[str, tuple[str, int, str | None]]:
    """``first_block_key -> (request_id, admitted, outcome)`` from the audit file."""
    db = Path(cl.config["state_dir"]) / "audit.db"
    with contextlib.closing(sqlite3.connect(db)) as con:
        q = "select first_block_key, request_id, admitted, outcome from decisions"
        return {k: (rid, adm, out) for k, rid, adm, out in con.execute(q)}


@contextlib.contextmanager
def _load(url: str, threads: int, tag: str) -> Iterator[list[Answer]]:
    """``threads`` clients sending requests back to back until the body ends."""
    answers: list[Answer] = []
    stop = threading.Event()

    def client(t: int) -> None:
        n = 0
        while not stop.is_set():
            a = _post(url, _prompt(f"{tag}{t:02d}-{n:06d}"))
            n += 1
            if a is None:
                time.sleep(0.05)  # the conductor is gone or restarting
            else:
                answers.append(a)

    pool = [threading.Thread(target=client, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    try:
        yield answers
    finally:
        stop.set()
        for th in pool:
            th.join(timeout=90)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # Two decode slots for 16 clients: admission answers many with a 429 right after
    # deciding, the answers a SIGKILL used to catch before their rows were written.
    with run_cluster(
        tmp_path, with_store=False, prefill=1, decode=1, block_size=BLOCK, max_batch=2
    ) as cl:
        yield cl


def _decisions(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return int(json.loads(r.read())["scheduler"]["decisions"])
    except (OSError, ValueError, KeyError):
        return None


def test_sigterm_writes_every_decided_request(cluster: Cluster) -> None:
    """Decide N requests, SIGTERM the conductor at once: each one has its row and outcome."""
    with _load(cluster.url, 8, "t") as answers:
        time.sleep(3.0)
    # The clients have their answers; the rows are younger than flush_interval_s.
    proc = cluster.procs["conductor"]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    stop_s = time.monotonic() - t0
    rows = _rows(cluster)
    missing = [a for a in answers if a.key not in rows]
    no_outcome = [a for a in answers if a.key in rows and rows[a.key][2] is None]
    statuses = sorted({a.status for a in answers})
    print(
        f"\nSIGTERM: {len(answers)} answered ({statuses}), {len(rows)} rows, "
        f"{len(missing)} without a row, {len(no_outcome)} without an outcome; "
        f"exit {rc} after {stop_s:.2f}s"
    )
    assert len(answers) >= 8
    assert rc == 0
    assert missing == []
    assert no_outcome == []


def test_sigkill_under_load_loses_no_answered_decision(cluster: Cluster) -> None:
    """SIGKILL the conductor under load: every request it answered has its decision row."""
    proc = cluster.procs["conductor"]
    with _load(cluster.url, 16, "k") as answers:
        time.sleep(4.0)
        decided = _decisions(cluster.url)  # a lower bound of what it decides before the kill
        kill9(proc)
        killed = len(answers)
    rows = _rows(cluster)
    answered = answers[:killed]
    missing = [a for a in answered if a.key not in rows]
    no_outcome = [a for a in answered if a.key in rows and rows[a.key][2] is None]
    unanswered = len(rows) - len({a.key for a in answered} & set(rows))
    by_status = {s: sum(1 for a in answered if a.status == s) for s in {a.status for a in answered}}
    print(
        f"\nSIGKILL: {len(answered)} answered {by_status}, {decided} decided before the kill "
        f"(at least), {len(rows)} rows; {len(missing)} answered without a row "
        f"({sum(1 for a in missing if a.status == 429)} of them 429s), "
        f"{len(no_outcome)} answered without an outcome, {unanswered} rows of requests "
        "never answered"
    )
    assert len(answered) >= 16
    assert missing == [], f"{len(missing)} answered requests have no audit row"
    assert no_outcome == [], f"{len(no_outcome)} answered requests have no outcome"
