"""AuditWriter: exact batching, bounded queue, actual latency updates, retention."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import replace

import pytest
from sqlalchemy.engine import make_url

from mooncake_core.conductor.audit import (
    AuditReader,
    AuditWriter,
    CandidateRecord,
    DecisionRecord,
    WriterOptions,
    apply_retention,
    make_engine,
)
from mooncake_core.config import AuditConfig

T0 = 1_800_000_000.0


def _dec(i: int, *, request: str | None = None, t: float | None = None) -> DecisionRecord:
    return DecisionRecord(
        time=T0 + i if t is None else t,
        request_id=request or f"r{i}",
        prompt_tokens=32,
        prompt_blocks=2,
        policy="kvcache_centric",
        chosen_prefill="prefill-0",
        chosen_decode="decode-0",
        predicted_ttft_s=0.5,
        predicted_tbt_s=0.04,
    )


def _cands(n: int = 2) -> tuple[CandidateRecord, ...]:
    return tuple(
        CandidateRecord(instance=f"prefill-{k}", role="prefill", chosen=k == 0) for k in range(n)
    )


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(make_url(url).database or "")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_batches_are_exactly_batch_size(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=3))
    for i in range(7):
        assert w.submit(_dec(i), _cands(2))
    assert w.snapshot().queue_depth == 7
    w.flush()
    snap = w.snapshot()
    assert (snap.submitted, snap.written, snap.batches, snap.queue_depth) == (7, 7, 3, 0)
    w.close()
    assert _rows(db_url, "SELECT id, request_id FROM decisions ORDER BY id") == [
        (i + 1, f"r{i}") for i in range(7)
    ]
    assert _rows(db_url, "SELECT decision_id, count(*) FROM candidates GROUP BY 1") == [
        (i + 1, 2) for i in range(7)
    ]


def test_full_queue_drops_and_counts_never_blocks(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=10, queue_max=5))
    accepted = [w.submit(_dec(i), _cands()) for i in range(7)]
    assert accepted == [True] * 5 + [False] * 2
    assert w.update_actual("r0", 1.0, None) is False
    snap = w.snapshot()
    assert (snap.submitted, snap.dropped, snap.updates_dropped, snap.queue_depth) == (5, 2, 1, 5)
    w.close()
    assert _rows(db_url, "SELECT count(*) FROM decisions") == [(5,)]


def test_update_actual_targets_latest_decision_and_none_keeps_value(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=100))
    w.submit(_dec(0, request="again"), _cands())
    w.submit(_dec(1, request="again"), _cands())  # the request came back
    w.update_actual("again", 0.7, None)  # same batch as the inserts: applied after them
    w.flush()
    w.update_actual("again", None, 0.03)
    w.update_actual("unknown-request", 1.0, 1.0)  # harmless
    w.close()
    assert _rows(db_url, "SELECT id, actual_ttft_s, actual_tbt_s FROM decisions ORDER BY id") == [
        (1, None, None),
        (2, 0.7, 0.03),
    ]
    assert w.snapshot().updates_applied == 3


def test_background_thread_writes_without_flush(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=4, flush_interval_s=0.05))
    w.start()
    for i in range(10):
        w.submit(_dec(i), _cands())
    deadline = time.monotonic() + 10
    while w.snapshot().written < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    snap = w.snapshot()
    assert snap.running
    assert snap.written == 10
    w.close()
    assert not w.snapshot().running


def test_ids_continue_after_reopen(db_url: str) -> None:
    with AuditWriter.open(db_url) as w:
        for i in range(3):
            w.submit(_dec(i), _cands())
    with AuditWriter.open(db_url) as w:
        for i in range(3, 5):
            w.submit(_dec(i), _cands())
    assert _rows(db_url, "SELECT id FROM decisions ORDER BY id") == [(i,) for i in range(1, 6)]


def test_bad_record_costs_only_itself(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=10))
    w.submit(_dec(0), _cands())
    w.submit(replace(_dec(1), prompt_tokens=None), _cands())  # type: ignore[arg-type]
    w.submit(_dec(2), _cands())
    w.close()
    snap = w.snapshot()
    assert (snap.written, snap.failed) == (2, 1)
    assert snap.last_error is not None and "'r1'" in snap.last_error
    assert _rows(db_url, "SELECT request_id FROM decisions ORDER BY id") == [("r0",), ("r2",)]
    # No orphan candidates from the failed decision.
    assert _rows(db_url, "SELECT count(*) FROM candidates") == [(4,)]


def test_retention_by_rows_keeps_newest_exactly(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(retention_rows=4, retention_days=365))
    for i in range(10):
        w.submit(_dec(i), _cands(3))
    w.flush()
    res = w.run_retention(now=T0 + 100)
    assert (res.by_age, res.by_rows, res.total) == (0, 6, 6)
    assert w.snapshot().retention_deleted == 6
    w.close()
    assert _rows(db_url, "SELECT id FROM decisions ORDER BY id") == [(7,), (8,), (9,), (10,)]
    assert _rows(db_url, "SELECT DISTINCT decision_id FROM candidates ORDER BY 1") == [
        (7,),
        (8,),
        (9,),
        (10,),
    ]


def test_retention_by_age_exact_boundary(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(retention_days=1.0))
    for i in range(10):
        w.submit(_dec(i), _cands())
    w.flush()
    # cutoff = T0 + 5: decisions at T0+0..T0+4 go, T0+5 (exactly at the cutoff) stays.
    res = w.run_retention(now=T0 + 86_400 + 5)
    w.close()
    assert (res.by_age, res.by_rows) == (5, 0)
    assert _rows(db_url, "SELECT min(time), count(*) FROM decisions") == [(T0 + 5, 5)]
    assert _rows(db_url, "SELECT count(*) FROM candidates") == [(10,)]


def test_apply_retention_both_rules_and_bad_arguments(db_url: str) -> None:
    with AuditWriter.open(db_url) as w:
        for i in range(10):
            w.submit(_dec(i), _cands())
    engine = make_engine(db_url)
    with engine.begin() as conn:
        with pytest.raises(ValueError, match="max_rows must be >= 1, got 0"):
            apply_retention(conn, now=T0, max_age_s=1, max_rows=0)
        with pytest.raises(ValueError, match="max_age_s must be > 0"):
            apply_retention(conn, now=T0, max_age_s=0, max_rows=5)
        res = apply_retention(conn, now=T0 + 10, max_age_s=8, max_rows=3)
    engine.dispose()
    # Age removes T0+0, T0+1 (8 left); rows keeps the newest 3.
    assert (res.by_age, res.by_rows) == (2, 5)
    with AuditReader.open(db_url) as r:
        assert [x.decision.request_id for x in r.find()] == ["r9", "r8", "r7"]


def test_options_validation_and_from_config() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        WriterOptions(batch_size=0)
    with pytest.raises(ValueError, match="flush_interval_s must be > 0"):
        WriterOptions(flush_interval_s=0)
    cfg = AuditConfig(batch_size=64, flush_interval_s=0.25, retention_days=7, retention_rows=5000)
    opts = WriterOptions.from_config(cfg, queue_max=10)
    assert (opts.batch_size, opts.flush_interval_s, opts.retention_days) == (64, 0.25, 7)
    assert (opts.retention_rows, opts.queue_max) == (5000, 10)


def test_large_batch_spans_several_multirow_statements(db_url: str) -> None:
    # 300 decisions x 3 candidates: 256 + 44 decision rows and 256*3 + 132 candidate rows.
    w = AuditWriter.open(db_url, WriterOptions(batch_size=300))
    for i in range(300):
        cands = tuple(
            CandidateRecord(instance=f"p{i}-{k}", role="prefill", matched_prefix_blocks=k)
            for k in range(3)
        )
        w.submit(_dec(i), cands)
    w.close()
    assert w.snapshot().batches == 1
    assert _rows(db_url, "SELECT count(*), min(id), max(id) FROM decisions") == [(300, 1, 300)]
    assert _rows(
        db_url,
        "SELECT d.request_id, c.instance, c.matched_prefix_blocks FROM candidates c "
        "JOIN decisions d ON d.id = c.decision_id WHERE d.id IN (1, 257, 300) ORDER BY c.id",
    ) == [(f"r{i}", f"p{i}-{k}", k) for i in (0, 256, 299) for k in range(3)]


def test_background_thread_runs_retention_periodically(db_url: str) -> None:
    opts = WriterOptions(
        batch_size=5, flush_interval_s=0.02, retention_rows=3, retention_interval_s=0.02
    )
    w = AuditWriter.open(db_url, opts)
    for i in range(10):
        w.submit(_dec(i), _cands())
    w.start()
    deadline = time.monotonic() + 10
    while w.snapshot().retention_deleted < 7 and time.monotonic() < deadline:
        time.sleep(0.01)
    w.close()
    assert w.snapshot().retention_deleted == 7
    assert _rows(db_url, "SELECT id FROM decisions ORDER BY id") == [(8,), (9,), (10,)]


def test_submit_after_close_is_dropped_and_counted(db_url: str) -> None:
    w = AuditWriter.open(db_url)
    w.submit(_dec(0), _cands())
    w.close()
    assert w.submit(_dec(1), _cands()) is False
    assert w.update_actual("r0", 1.0, 1.0) is False
    snap = w.snapshot()
    assert (snap.written, snap.dropped, snap.updates_dropped, snap.queue_depth) == (1, 1, 1, 0)
    with pytest.raises(RuntimeError, match="closed"):
        w.start()


class _Source:
    """Stands in for the conductor's Decision: converted by the writer thread."""

    def __init__(self, i: int, fail: bool = False) -> None:
        self.i = i
        self.fail = fail

    def to_record(self) -> tuple[DecisionRecord, tuple[CandidateRecord, ...]]:
        if self.fail:
            raise ValueError("cannot convert")
        return _dec(self.i), _cands(3)


def test_submit_source_converts_on_the_writer_side(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=10))
    assert w.submit_source(_Source(0))
    assert w.submit_source(_Source(1, fail=True))
    w.submit(_dec(2), _cands(1))
    w.close()
    snap = w.snapshot()
    assert (snap.submitted, snap.written, snap.failed) == (3, 2, 1)
    assert snap.last_error == "to_record() of _Source: cannot convert"
    assert _rows(
        db_url,
        "SELECT d.request_id, count(c.id) FROM decisions d "
        "JOIN candidates c ON c.decision_id = d.id GROUP BY d.id ORDER BY d.id",
    ) == [
        ("r0", 3),
        ("r2", 1),
    ]


def test_when_written_fires_after_the_rows_before_it_are_committed(db_url: str) -> None:
    # A long flush interval: only the barrier can make the thread write this soon.
    w = AuditWriter.open(db_url, WriterOptions(batch_size=100, flush_interval_s=60.0))
    w.start()
    seen: list[tuple[bool, object]] = []
    fired = threading.Event()

    def done(ok: bool) -> None:
        seen.append((ok, _rows(db_url, "SELECT count(*) FROM decisions")[0][0]))
        fired.set()

    for i in range(3):
        w.submit(_dec(i), _cands())
    w.record_outcome("r2", "completed")
    w.when_written(done)
    w.submit(_dec(3), _cands())  # after the barrier: not waited for
    assert fired.wait(10)
    assert seen[0][0] is True and int(str(seen[0][1])) >= 3
    assert _rows(db_url, "SELECT outcome FROM decisions WHERE request_id = 'r2'") == [
        ("completed",)
    ]
    w.close()
    # Closed (or full): the callback runs at once with False.
    late: list[bool] = []
    w.when_written(late.append)
    assert late == [False]


def test_when_written_on_a_full_queue_is_false_at_once(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=10, queue_max=2))
    w.submit(_dec(0), _cands())
    w.submit(_dec(1), _cands())
    got: list[bool] = []
    w.when_written(got.append)
    assert got == [False]
    w.close()


def test_when_written_alone_needs_no_transaction(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=10))
    got: list[bool] = []
    w.when_written(got.append)
    w.flush()
    assert got == [True]
    assert w.snapshot().batches == 0
    w.close()
