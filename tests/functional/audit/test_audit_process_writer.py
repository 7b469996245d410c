"""The audit writer in its own process (``audit.writer: process``), against a real SQLite
database and its real child process: faults of the writer process lose no decision and
write none twice; the conductor's death does not leave it behind.

Decisions come from the real sans-IO Conductor (16 prefill + 16 decode instances: 32
candidates each), so the candidate inputs, not rows, cross the pipe.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from mooncake_core.conductor import (
    BlockStored,
    Conductor,
    ConductorOptions,
    Decision,
    ScheduleRequest,
    Tier,
)
from mooncake_core.conductor.audit import ProcessAuditWriter, WriterOptions, upgrade
from mooncake_core.config.models import ConductorConfig, HashingConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def decisions(n: int, prefix: str = "r") -> list[Decision]:
    prefill = [f"prefill-{i}" for i in range(16)]
    c = Conductor(
        ConductorConfig(policy="kvcache_centric", admission="none"),
        prefill,
        {f"decode-{i}": 64 for i in range(16)},
        hashing=HashingConfig(block_size=512),
        options=ConductorOptions(seed=1),
    )
    for i, inst in enumerate(prefill):
        c.apply(BlockStored(inst, Tier.HBM, tuple(range(100 * i, 100 * i + 1 + i))))
    return [
        c.schedule(ScheduleRequest(f"{prefix}{k}", (100 * (k % 16), 10**6 + k), 1100, 8), 1.8e9 + k)
        for k in range(n)
    ]


def counts(url: str) -> tuple[int, int, int, int]:
    """(decisions, distinct request ids, candidates, decisions with an outcome)."""
    with create_engine(url).connect() as conn:
        row = conn.execute(
            text(
                "select count(*), count(distinct request_id), "
                "(select count(*) from candidates), count(outcome) from decisions"
            )
        ).one()
    return row[0], row[1], row[2], row[3]


@pytest.fixture
def url(tmp_path: Path) -> str:
    u = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade(u, "head")
    return u


def _stored(url: str) -> list[tuple[Any, ...]]:
    """Every decision with its candidates, without the database's own ids."""
    with create_engine(url).connect() as conn:
        ds = conn.execute(text("select * from decisions order by request_id")).mappings().all()
        cs = conn.execute(text("select * from candidates order by id")).mappings().all()
    by_decision: dict[int, list[tuple[Any, ...]]] = {}
    for c in cs:
        row = tuple(v for k, v in c.items() if k not in ("id", "decision_id"))
        by_decision.setdefault(c["decision_id"], []).append(row)
    return [(tuple(v for k, v in d.items() if k != "id"), by_decision.get(d["id"], [])) for d in ds]


def test_the_writer_process_stores_exactly_what_the_thread_writer_stores(
    tmp_path: Path,
) -> None:
    # The decisions cross a pipe packed by the C encoder; every number, name and
    # sentence of every row must come out as the conductor's own process makes it.
    from mooncake_core.conductor.audit import AuditWriter

    urls = []
    for name in ("thread.db", "process.db"):
        urls.append(f"sqlite:///{tmp_path / name}")
        upgrade(urls[-1], "head")
    ds = decisions(200)
    with AuditWriter.open(urls[0]) as t, ProcessAuditWriter(urls[1]) as p:
        for d in ds:
            assert t.submit_source(d) and p.submit_source(d)
    stored = _stored(urls[0])
    assert len(stored) == 200 and all(len(c) == 32 for _, c in stored)
    assert _stored(urls[1]) == stored


def test_the_writer_process_yields_the_cpu_to_the_conductor(url: str) -> None:
    from mooncake_core.conductor.audit.writer_child import NICE

    with ProcessAuditWriter(url) as w:
        assert w.pid is not None
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, w.pid) == min(mine + NICE, 19) > mine


def test_a_source_that_does_not_pack_is_refused_and_named(url: str) -> None:
    class NotADecision:
        def to_record(self) -> Any:
            raise AssertionError("the process writer never builds records here")

    with ProcessAuditWriter(url) as w:
        assert not w.submit_source(NotADecision())  # type: ignore[arg-type]
        assert w.submit_source(decisions(1)[0])
        assert w.flush(30)
        snap = w.snapshot()
    assert (snap.dropped, snap.written) == (1, 1), snap
    assert "a NotADecision does not pack" in (snap.last_error or ""), snap
    assert counts(url)[:2] == (1, 1)


def test_a_killed_writer_process_is_replaced_and_nothing_is_lost_or_doubled(url: str) -> None:
    ds = decisions(3000)
    w = ProcessAuditWriter(url, WriterOptions(batch_size=128, flush_interval_s=0.05))
    w.start()
    first = w.pid
    assert first is not None
    for k, d in enumerate(ds):
        assert w.submit_source(d)
        w.record_outcome(d.request_id, "completed")
        if k == 1500:
            os.kill(first, signal.SIGKILL)  # mid-stream: some frames committed, not acked
    assert w.flush(60)
    snap = w.snapshot()
    w.close()
    assert w.restarts == 1 and snap.written == 3000 and snap.updates_applied == 3000, snap
    assert "exited (-9)" in (snap.last_error or ""), snap
    assert counts(url) == (3000, 3000, 3000 * 32, 3000)


def test_a_paused_writer_process_never_blocks_the_decision_path(url: str) -> None:
    ds = decisions(600)
    w = ProcessAuditWriter(url, WriterOptions(batch_size=64, flush_interval_s=0.05))
    w.start()
    pid = w.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        done = threading.Event()
        t0 = time.perf_counter()
        for d in ds:
            assert w.submit_source(d)  # the pipe fills up; submitting must not wait
        w.when_written(lambda ok: done.set())
        took = time.perf_counter() - t0
        assert took < 1.0, took
        assert not done.wait(1.0), "committed while the writer process was stopped"
        assert w.snapshot().queue_depth == 600
    finally:
        os.kill(pid, signal.SIGCONT)
    assert done.wait(30)
    w.close()
    assert w.restarts == 0
    assert counts(url)[:3] == (600, 600, 600 * 32)


def test_the_writer_process_commits_what_it_read_and_exits_when_the_conductor_dies(
    url: str, tmp_path: Path
) -> None:
    # A stand-in conductor: a process that writes 500 decisions through the process
    # writer, waits until they are committed, says so, then sleeps until killed.
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_audit_process_writer import decisions
        from mooncake_core.conductor.audit import ProcessAuditWriter, WriterOptions
        w = ProcessAuditWriter({url!r}, WriterOptions(flush_interval_s=0.05))
        w.start()
        for d in decisions(500):
            w.submit_source(d)
        assert w.flush(60)
        print(w.pid, flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        # Reap it if it is ours (it is the dead parent's; init reaps it otherwise).
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists(), "writer process outlived its conductor"
    assert counts(url)[:2] == (500, 500)


def test_a_database_the_writer_process_cannot_open_fails_start_with_its_error(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'never-upgraded.db'}"
    w = ProcessAuditWriter(url)
    with pytest.raises(RuntimeError, match=r"never-upgraded\.db"):
        w.start()


def test_decisions_read_again_after_a_restart_are_not_written_twice(url: str) -> None:
    # What a new writer process does with the records of one that died after committing
    # them but before releasing them in the ring: it reads them again.
    from mooncake_core.conductor.audit.process_writer import read_frame, write_frame
    from mooncake_core.conductor.audit.ring import DECISION, OUTCOME, SharedRing
    from mooncake_core.conductor.audit.writer_child import serve
    from mooncake_core.conductor.candidates import decision_to_wire

    ds = decisions(11)
    opts = {"batch_size": 512, "flush_interval_s": 0.05, "retention_days": 30.0,
            "retention_rows": 10_000_000, "queue_max": 1000, "retention_interval_s": 60.0}  # fmt: skip
    ring = SharedRing.create(1 << 20)

    def run() -> list[Any]:
        """A writer process's loop until its input ends; its acknowledgements."""
        r, wr = os.pipe()
        with os.fdopen(wr, "wb") as inp:
            write_frame(inp, (url, opts, ring.fd))
        out = io.BytesIO()
        with os.fdopen(r, "rb") as inp_r:
            assert serve(inp_r, out) == 0
        out.seek(0)
        replies = []
        while True:
            try:
                replies.append(read_frame(out))
            except EOFError:
                return replies

    for d in ds[:10]:
        assert ring.push(DECISION, decision_to_wire(d))
    assert ring.push(OUTCOME, (ds[0].request_id, "completed", None)) == 11
    assert run()[-1][:2] == (11, True)
    assert counts(url) == (10, 10, 320, 1)
    assert ring.released()[1:] == (11, 10, 1)
    # As if that process had died before releasing them: all read again, with one more.
    ring.release(0, 0, 0, 0)
    assert ring.push(DECISION, decision_to_wire(ds[10])) == 12
    last = run()[-1]
    assert last[:2] == (12, True) and last[3:] == (11, 1), last
    assert counts(url) == (11, 11, 352, 1)
    # A record after the released position at start is new: written even if the same.
    assert ring.push(DECISION, decision_to_wire(ds[10])) == 13
    run()
    assert counts(url)[:2] == (12, 11)
    ring.close()


def test_the_ring_hands_over_every_record_in_order_through_wraps_and_refuses_when_full() -> None:
    from mooncake_core import _flat
    from mooncake_core.conductor.audit.ring import UPDATE, SharedRing

    ring = SharedRing.create(4096)
    reader = SharedRing(os.dup(ring.fd))  # the other side's view of the same memory
    pending: list[tuple[Any, ...]] = []
    pos = done = full = 0
    for i in range(3000):
        value = ("r" * (i % 301), i, 0.5)
        n = ring.push(UPDATE, value)
        if n:
            pending.append(value)
            assert n == done + len(pending)
            continue
        full += 1
        for _ in range(1 + i % 7):  # the reader frees a few
            rec = reader.read(pos)
            if rec is None:
                break
            kind, payload, pos = rec
            assert (kind, _flat.unpack(payload)) == (UPDATE, pending.pop(0))
            done += 1
            reader.release(pos, done, 0, done)
    while (rec := reader.read(pos)) is not None:
        kind, payload, pos = rec
        assert _flat.unpack(payload) == pending.pop(0)
        done += 1
    assert not pending and full > 100 and done == ring.written > 2000
    assert ring.head == pos > 100 * 4096  # it went round many times
    with pytest.raises(ValueError, match="larger than the ring"):
        ring.push(UPDATE, "x" * 5000)
    with pytest.raises(ValueError, match="not in the ring"):
        reader.read(pos + 8)
    reader.close()
    ring.close()
