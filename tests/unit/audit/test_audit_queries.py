"""AuditReader on the documented scenario: filters, show, explain, stats, export."""

from __future__ import annotations

import csv
import io
import json

import pytest

from mooncake_core.conductor.audit import AuditReader, DecisionFilter

T0 = 1_800_000_000.0  # the scenario start used by the filled_url fixture (conftest.py)


@pytest.fixture
def reader(filled_url: str) -> AuditReader:
    return AuditReader.open(filled_url)


def _ids(reader: AuditReader, **kw: object) -> list[str]:
    return [x.decision.request_id for x in reader.find(DecisionFilter(**kw))]  # type: ignore[arg-type]


def test_find_newest_first_with_chosen_prefill_hits(reader: AuditReader) -> None:
    rows = reader.find()
    assert [(r.id, r.decision.request_id, r.matched_prefix_blocks) for r in rows] == [
        (4, "req-d", 0),
        (3, "req-c", 2),
        (2, "req-b", 0),
        (1, "req-a", 12),
    ]
    assert reader.count() == 4


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"instance": "prefill-2"}, ["req-a"]),  # migration source is not "chosen"
        ({"instance": "decode-1"}, ["req-c", "req-b"]),
        ({"policy": "round_robin"}, ["req-d"]),
        ({"rejected_only": True}, ["req-b"]),
        ({"since": T0 + 30, "until": T0 + 90}, ["req-c", "req-b"]),
        ({"request_id": "req-c"}, ["req-c"]),
        ({"limit": 2, "offset": 1}, ["req-c", "req-b"]),
        ({"instance": "prefill-9"}, []),
    ],
)
def test_find_filters(reader: AuditReader, kw: dict[str, object], expected: list[str]) -> None:
    assert _ids(reader, **kw) == expected


def test_filter_rejects_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit must be >= 0, got -1"):
        DecisionFilter(limit=-1)


def test_get_returns_decision_candidates_and_actuals(reader: AuditReader) -> None:
    e = reader.get("req-a")
    assert e is not None
    d = e.decision
    assert (d.chosen_prefill, d.chosen_decode, d.predicted_ttft_s, d.actual_ttft_s) == (
        "prefill-2",
        "decode-0",
        1.20,
        1.50,
    )
    assert d.actual_tbt_s == 0.050
    assert d.first_block_key == "9f2c4e1a0b7d6c35"
    assert [(c.instance, c.role, c.matched_prefix_blocks, c.chosen) for c in e.candidates] == [
        ("prefill-0", "prefill", 2, False),
        ("prefill-1", "prefill", 0, False),
        ("prefill-2", "prefill", 12, True),
        ("decode-0", "decode", 0, True),
        ("decode-1", "decode", 0, False),
    ]
    assert e.candidates[0].transfer_blocks == 10
    assert e.candidates[0].why_not == "predicted TTFT 0.31 s higher"
    assert reader.get("nope") is None


def test_explain_chosen_pair_and_runner_up(reader: AuditReader) -> None:
    assert reader.explain("req-a") == (
        "Request req-a (230 tokens, 14 blocks) was scheduled by policy kvcache_centric. "
        "prefill-2 was chosen for prefill because it held 12 of 14 prefix blocks, "
        "queues 0.10 s and prefills in 1.10 s: predicted TTFT 1.20 s. "
        "The runner-up prefill-0 (predicted TTFT 1.51 s, 0.31 s slower) held 2 of 14 prefix "
        "blocks and would have needed to fetch 10 blocks from prefill-2 (0.31 s), queue 0.80 s and prefill "
        "for 0.40 s (not chosen: predicted TTFT 0.31 s higher). "
        "decode-0 was chosen for decode with predicted TBT 45 ms; the runner-up decode-1 "
        "predicted 60 ms (not chosen: predicted TBT 15 ms higher). "
        "Measured TTFT 1.50 s against 1.20 s predicted (error +0.30 s, 20%). "
        "Measured TBT 50 ms against 45 ms predicted (error +5 ms, 10%). "
        "It completed: every token was delivered."
    )


def test_explain_rejection_and_migration(reader: AuditReader) -> None:
    b = reader.explain("req-b")
    assert b is not None
    assert (
        "It was rejected by admission control: decode load predicted at 0.97 when prefill "
        "ends (limit 0.95); the best pair was prefill-1 + decode-1 with predicted TTFT "
        "3.00 s and TBT 0.21 s. The client was told to retry after 2.00 s."
    ) in b
    c = reader.explain("req-c")
    assert c is not None
    assert "prefill-1 was chosen for prefill because it held 2 of 10 prefix blocks, " in c
    assert "fetches 8 more (0.25 s)" in c
    assert "Hotspot migration: prefill-1 fetches 8 blocks from prefill-2 and keeps a replica." in c
    # -0.0999... s rounds to 100 ms, which prints as 0.10 s (the rule switches on the
    # rounded value, so 0.1 s never reads "100 ms" on one side and "0.10 s" on the other).
    assert "error -0.10 s, 20%" in c
    assert c.endswith(
        " It was cancelled before the last token: stream closed before the last token "
        "(client gone)."
    )
    d = reader.explain("req-d")
    assert d is not None
    assert "prefill-0 was chosen for prefill by round_robin (not by cost): it held 0 of 4" in d
    assert "It was the only prefill candidate." in d
    assert d.endswith("decode-0 was chosen for decode with predicted TBT 40 ms.")  # no outcome
    assert reader.explain("nope") is None


def test_stats_buckets_exact(reader: AuditReader) -> None:
    st = reader.stats(60.0)
    assert [b.start for b in st.buckets] == [T0, T0 + 60]
    b1, b2 = st.buckets
    assert (b1.decisions, b1.rejected, b1.rejection_rate) == (2, 1, 0.5)
    # req-b was rejected, so only req-a counts toward the hit rate: 12 of 14.
    assert (b1.matched_blocks, b1.prompt_blocks, b1.hit_rate) == (12, 14, pytest.approx(12 / 14))
    assert b1.measured == 1
    assert b1.ttft_mae_s == pytest.approx(0.30)
    assert b1.ttft_mre == pytest.approx(0.20)
    # bias = mean of actual - predicted: req-a took 1.50 s against 1.20 s predicted.
    assert b1.ttft_bias_s == pytest.approx(0.30)
    assert (b2.decisions, b2.rejected, b2.matched_blocks, b2.prompt_blocks) == (2, 0, 2, 14)
    # req-c took 0.50 s against 0.60 s predicted: faster, so negative.
    assert b2.ttft_bias_s == pytest.approx(-0.10)
    t = st.total
    assert (t.decisions, t.rejected, t.matched_blocks, t.prompt_blocks, t.measured) == (
        4,
        1,
        14,
        28,
        2,
    )
    assert t.hit_rate == pytest.approx(0.5)
    assert t.ttft_mae_s == pytest.approx(0.20)
    assert t.ttft_mre == pytest.approx(0.20)
    assert t.ttft_bias_s == pytest.approx(0.10)
    with pytest.raises(ValueError, match="bucket_s must be > 0"):
        reader.stats(0)


def test_stats_with_filter_and_empty(reader: AuditReader) -> None:
    st = reader.stats(3600.0, DecisionFilter(policy="round_robin"))
    assert [b.decisions for b in st.buckets] == [1]
    assert st.total.ttft_mae_s is None
    empty = reader.stats(60.0, DecisionFilter(policy="random"))
    assert empty.buckets == ()
    assert (empty.total.decisions, empty.total.hit_rate) == (0, None)


def test_export_csv_and_jsonl(reader: AuditReader) -> None:
    buf = io.StringIO()
    assert reader.export(buf, "csv") == 4
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert [r["request_id"] for r in rows] == ["req-a", "req-b", "req-c", "req-d"]
    assert rows[0]["chosen_prefill"] == "prefill-2"
    assert rows[0]["actual_ttft_s"] == "1.5"
    assert rows[1]["admitted"] == "False"

    buf = io.StringIO()
    assert reader.export(buf, "jsonl", DecisionFilter(instance="decode-1", limit=None)) == 2
    objs = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [o["request_id"] for o in objs] == ["req-b", "req-c"]
    assert [c["instance"] for c in objs[1]["candidates"]] == ["prefill-1", "prefill-2", "decode-1"]
    assert objs[1]["migration_source"] == "prefill-2"
    with pytest.raises(ValueError, match="csv or jsonl, got 'xml'"):
        reader.export(io.StringIO(), "xml")  # type: ignore[arg-type]
