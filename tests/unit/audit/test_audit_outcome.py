"""Request outcomes: migration 0003, AuditWriter.record_outcome, filters, stats, explain."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.config import main as alembic_main

from mooncake_core.conductor.audit import (
    OUTCOME_DETAIL_MAX,
    AuditEntry,
    AuditReader,
    AuditWriter,
    CandidateRecord,
    DecisionFilter,
    DecisionRecord,
    WriterOptions,
    explain,
    upgrade,
)
from mooncake_core.conductor.audit.models import SCHEMA_REVISION

T0 = 1_800_000_000.0
REPO = Path(__file__).resolve().parents[3]


def _alembic(url: str, *args: str) -> None:
    alembic_main(["-c", str(REPO / "alembic.ini"), "-x", f"url={url}", *args])


def _dec(rid: str, t: float, *, admitted: bool = True) -> DecisionRecord:
    return DecisionRecord(
        time=t,
        request_id=rid,
        prompt_tokens=32,
        prompt_blocks=2,
        policy="kvcache_centric",
        chosen_prefill="prefill-0",
        chosen_decode="decode-0",
        predicted_ttft_s=0.5,
        admitted=admitted,
        reject_reason=None if admitted else "decode_full: no slot",
    )


_CANDS = (CandidateRecord(instance="prefill-0", role="prefill", chosen=True),)


def _sql(path: Path, q: str, *args: object) -> list[tuple[object, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(q, args).fetchall()
    finally:
        con.close()


# -- migration 0003 ----------------------------------------------------------------


def test_upgrade_from_0002_keeps_rows_with_unknown_outcome_and_downgrade_drops_columns(
    tmp_path: Path,
) -> None:
    db = tmp_path / "audit.db"
    url = f"sqlite:///{db}"
    assert upgrade(url, "0002").current == "0002"
    con = sqlite3.connect(db)
    con.execute(
        "INSERT INTO decisions (id, time, request_id, prompt_tokens, prompt_blocks, "
        "first_block_key, block_key_count, policy, chosen_prefill, chosen_decode, "
        "predicted_ttft_s, predicted_tbt_s, admitted, reject_reason, retry_after_s, "
        "migration_source, migration_blocks, actual_ttft_s, actual_tbt_s) VALUES "
        "(3, 1800000000.0, 'old', 32, 2, 'ab', 2, 'cache_aware', 'prefill-0', 'decode-0', "
        "0.25, 0.04, 1, NULL, NULL, NULL, 0, 0.3, 0.05), "
        "(4, 1800000001.0, 'old-rej', 16, 1, NULL, 1, 'cache_aware', 'prefill-0', 'decode-0', "
        "0.25, 0.04, 0, 'decode_full: no slot', 1.0, NULL, 0, NULL, NULL)"
    )
    con.execute(
        "INSERT INTO candidates (decision_id, instance, role, matched_prefix_blocks, "
        "queue_time_s, transfer_time_s, prefill_time_s, predicted_ttft_s, predicted_tbt_s, "
        "chosen, why_not, transfer_blocks) VALUES "
        "(3, 'prefill-0', 'prefill', 2, 0.1, 0.0, 0.15, 0.25, NULL, 1, NULL, 0)"
    )
    con.commit()
    con.close()

    assert upgrade(url).current == "0006"
    # Every column of the old rows is kept; nothing recorded how they ended: NULL (and
    # NULL prediction inputs, revision 0004; NULL migration bandwidth, revision 0005).
    assert _sql(db, "SELECT * FROM decisions ORDER BY id") == [
        (3, T0, "old", 32, 2, "ab", 2, "cache_aware", "prefill-0", "decode-0", 0.25, 0.04, 1,
         None, None, None, 0, 0.3, 0.05, None, None, None, None, None, None),
        (4, T0 + 1, "old-rej", 16, 1, None, 1, "cache_aware", "prefill-0", "decode-0", 0.25, 0.04,
         0, "decode_full: no slot", 1.0, None, 0, None, None, None, None, None, None, None, None),
    ]  # fmt: skip
    assert _sql(db, "SELECT count(*) FROM candidates") == [(1,)]
    # Revision 0006: nothing recorded where an old row's fetch would come from.
    assert _sql(db, "SELECT instance, transfer_blocks, transfer_source FROM candidates") == [
        ("prefill-0", 0, None)
    ]
    assert ("ix_decisions_outcome",) in _sql(
        db, "SELECT name FROM sqlite_master WHERE type = 'index'"
    )
    with AuditReader.open(url) as r:
        assert [x.decision.request_id for x in r.find(DecisionFilter(outcome="unknown"))] == [
            "old-rej",
            "old",
        ]

    # New outcomes go in, then a downgrade removes the columns and keeps every row.
    w = AuditWriter.open(url)
    assert w.record_outcome("old", "completed")
    w.close()
    assert _sql(db, "SELECT outcome FROM decisions ORDER BY id") == [("completed",), (None,)]
    _alembic(url, "downgrade", "0002")
    cols = [r[1] for r in _sql(db, "PRAGMA table_info(decisions)")]
    assert cols[-2:] == ["actual_ttft_s", "actual_tbt_s"]
    assert "outcome" not in cols and "outcome_detail" not in cols
    assert ("ix_decisions_outcome",) not in _sql(
        db, "SELECT name FROM sqlite_master WHERE type = 'index'"
    )
    assert _sql(db, "SELECT id, request_id, actual_ttft_s FROM decisions ORDER BY id") == [
        (3, "old", 0.3),
        (4, "old-rej", None),
    ]
    assert _sql(db, "SELECT count(*) FROM candidates") == [(1,)]
    assert _sql(db, "SELECT version_num FROM alembic_version") == [("0002",)]
    # And up again: the columns come back empty.
    assert upgrade(url).current == SCHEMA_REVISION
    assert _sql(db, "SELECT id, outcome, outcome_detail FROM decisions ORDER BY id") == [
        (3, None, None),
        (4, None, None),
    ]


# -- writer ------------------------------------------------------------------------


def test_record_outcome_lands_on_the_latest_decision_after_it_in_one_batch(db_url: str) -> None:
    db = Path(db_url.removeprefix("sqlite:///"))
    w = AuditWriter.open(db_url, WriterOptions(batch_size=100))
    assert w.submit(_dec("a", T0), _CANDS)
    assert w.record_outcome("a", "rejected", "decode_kv_full: no room")
    # The same id again (a retried request): outcomes go to the newest decision.
    assert w.submit(_dec("a", T0 + 1), _CANDS)
    assert w.record_outcome("a", "failed", "worker prefill-0 gone")
    assert w.record_outcome("a", "completed")  # a later call replaces it
    assert w.record_outcome("nobody", "failed", "x")  # no decision: changes nothing
    assert w.submit(_dec("b", T0 + 2), _CANDS)
    w.flush()
    snap = w.snapshot()
    w.close()
    assert (snap.written, snap.updates_applied, snap.batches, snap.failed) == (3, 4, 1, 0)
    assert _sql(db, "SELECT id, request_id, outcome, outcome_detail FROM decisions") == [
        (1, "a", "rejected", "decode_kv_full: no room"),
        (2, "a", "completed", None),
        (3, "b", None, None),
    ]


def test_failed_batch_retried_one_by_one_keeps_queue_order(db_url: str) -> None:
    db = Path(db_url.removeprefix("sqlite:///"))
    w = AuditWriter.open(db_url, WriterOptions(batch_size=100))
    w.submit(_dec("a", T0), _CANDS)
    w.record_outcome("a", "rejected", "first")
    bad = DecisionRecord(time=T0, request_id=None, prompt_tokens=1, prompt_blocks=0, policy="x")  # type: ignore[arg-type]
    w.submit(bad, ())  # NOT NULL request_id: the batch fails, then goes record by record
    w.submit(_dec("a", T0 + 1), _CANDS)
    w.record_outcome("a", "completed")
    w.flush()
    snap = w.snapshot()
    w.close()
    assert (snap.written, snap.failed, snap.updates_applied) == (2, 1, 2)
    assert _sql(db, "SELECT request_id, outcome, outcome_detail FROM decisions ORDER BY id") == [
        ("a", "rejected", "first"),
        ("a", "completed", None),
    ]


def test_record_outcome_refuses_unknown_codes_and_cuts_long_details(db_url: str) -> None:
    db = Path(db_url.removeprefix("sqlite:///"))
    w = AuditWriter.open(db_url)
    with pytest.raises(ValueError, match=r"outcome must be one of .*; got 'ok'"):
        w.record_outcome("a", "ok")  # type: ignore[arg-type]
    assert w.snapshot().queue_depth == 0  # nothing was queued
    w.submit(_dec("a", T0), _CANDS)
    w.record_outcome("a", "failed", "e" * 600)
    w.close()
    ((detail,),) = _sql(db, "SELECT outcome_detail FROM decisions")
    assert isinstance(detail, str)
    assert len(detail) == OUTCOME_DETAIL_MAX == 512
    assert detail == "e" * 509 + "..."


def test_record_outcome_never_blocks_full_or_closed_queue_drops_and_counts(db_url: str) -> None:
    w = AuditWriter.open(db_url, WriterOptions(batch_size=10, queue_max=2))
    assert w.submit(_dec("a", T0), _CANDS)
    assert w.record_outcome("a", "completed")
    assert w.record_outcome("a", "failed", "late") is False  # queue full
    assert w.snapshot().updates_dropped == 1
    w.close()
    assert w.record_outcome("a", "cancelled") is False  # closed
    snap = w.snapshot()
    assert (snap.written, snap.updates_applied, snap.updates_dropped) == (1, 1, 2)
    with AuditReader.open(db_url) as r:
        entry = r.get("a")
    assert entry is not None and entry.decision.outcome == "completed"


# -- reading -----------------------------------------------------------------------


@pytest.fixture
def outcomes_url(db_url: str) -> str:
    """Six decisions, two 60 s buckets, one of each outcome plus an unknown one."""
    w = AuditWriter.open(db_url)
    plan = [
        ("c1", 0.0, True, "completed", None),
        ("r1", 10.0, False, "rejected", "decode_full: no slot"),
        ("k1", 20.0, True, "rejected", "decode_kv_full: RESOURCE_EXHAUSTED: no room"),
        ("f1", 60.0, True, "failed", "rejected at decode join: decode_full"),
        ("x1", 70.0, True, "cancelled", "request task cancelled"),
        ("u1", 80.0, True, None, None),
    ]
    for rid, dt, admitted, outcome, detail in plan:
        w.submit(_dec(rid, T0 + dt, admitted=admitted), _CANDS)
        if outcome is not None:
            w.record_outcome(rid, outcome, detail)
    w.update_actual("c1", 0.4, 0.05)
    w.close()
    return db_url


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ("completed", ["c1"]),
        ("rejected", ["k1", "r1"]),
        ("failed", ["f1"]),
        ("cancelled", ["x1"]),
        ("unknown", ["u1"]),
        (None, ["u1", "x1", "f1", "k1", "r1", "c1"]),
    ],
)
def test_find_and_count_by_outcome(outcomes_url: str, outcome: str, expected: list[str]) -> None:
    with AuditReader.open(outcomes_url) as r:
        flt = DecisionFilter(outcome=outcome)
        assert [x.decision.request_id for x in r.find(flt)] == expected
        assert r.count(flt) == len(expected)


def test_filter_refuses_an_unknown_outcome() -> None:
    with pytest.raises(ValueError, match=r"outcome must be one of completed, .*unknown; got 'ok'"):
        DecisionFilter(outcome="ok")


def test_stats_count_each_outcome_per_bucket(outcomes_url: str) -> None:
    with AuditReader.open(outcomes_url) as r:
        st = r.stats(60.0)
        only_failed = r.stats(60.0, DecisionFilter(outcome="failed"))

    def counts(b: object) -> tuple[int, ...]:
        return tuple(
            getattr(b, f"outcome_{k}")
            for k in ("completed", "rejected", "rejected_late", "failed", "cancelled", "unknown")
        )

    assert [(b.decisions, b.rejected) for b in st.buckets] == [(3, 1), (3, 0)]
    assert [counts(b) for b in st.buckets] == [(1, 2, 1, 0, 0, 0), (0, 0, 0, 1, 1, 1)]
    assert counts(st.total) == (1, 2, 1, 1, 1, 1)
    assert only_failed.total.decisions == 1 and counts(only_failed.total) == (0, 0, 0, 1, 0, 0)


def test_get_and_export_carry_the_outcome(outcomes_url: str) -> None:
    import io
    import json

    with AuditReader.open(outcomes_url) as r:
        entry = r.get("k1")
        buf = io.StringIO()
        assert r.export(buf, "jsonl", DecisionFilter(outcome="failed", limit=None)) == 1
    assert entry is not None
    assert (entry.decision.admitted, entry.decision.outcome, entry.decision.outcome_detail) == (
        True,
        "rejected",
        "decode_kv_full: RESOURCE_EXHAUSTED: no room",
    )
    row = json.loads(buf.getvalue())
    assert (row["request_id"], row["outcome"], row["outcome_detail"]) == (
        "f1",
        "failed",
        "rejected at decode join: decode_full",
    )


def _entry(**kw: object) -> AuditEntry:
    base: dict[str, object] = {
        "time": 0.0,
        "request_id": "r",
        "prompt_tokens": 48,
        "prompt_blocks": 3,
        "policy": "load_balance",
        "chosen_prefill": "p0",
        "chosen_decode": "d0",
        "predicted_ttft_s": 0.5,
    }
    base.update(kw)
    return AuditEntry(1, DecisionRecord(**base), ())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("outcome", "detail", "sentence"),
    [
        ("completed", None, "It completed: every token was delivered."),
        (
            "rejected",
            "decode_kv_full: no room",
            "It was admitted, then rejected with HTTP 429: decode_kv_full: no room.",
        ),
        ("failed", "decode stream: UNAVAILABLE", "It failed: decode stream: UNAVAILABLE."),
        (
            "cancelled",
            "request task cancelled",
            "It was cancelled before the last token: request task cancelled.",
        ),
    ],
)
def test_explain_ends_with_the_outcome(outcome: str, detail: str | None, sentence: str) -> None:
    text = explain(_entry(outcome=outcome, outcome_detail=detail))
    assert text.endswith(" " + sentence)


def test_explain_says_nothing_of_an_unknown_outcome_or_a_plain_rejection() -> None:
    assert "It " not in explain(_entry()).split("was scheduled by policy load_balance.")[1]
    rejected = explain(
        _entry(
            admitted=False, reject_reason="decode_full: x", outcome="rejected", outcome_detail="y"
        )
    )
    assert rejected.endswith("It was rejected by admission control: decode_full: x; the best "
                             "pair was p0 + d0 with predicted TTFT 0.50 s and TBT ?.")  # fmt: skip
