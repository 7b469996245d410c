"""Revision 0004: what a decision's prediction was made of (calibration, decode KV), in the
database, in ``audit explain`` and in ``audit stats``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mooncake_core.conductor import (
    Conductor,
    ConductorOptions,
    DecodeStepModel,
    NetworkModel,
    PrefillTimeModel,
    ScheduleRequest,
)
from mooncake_core.conductor.audit import (
    AuditReader,
    AuditWriter,
    DecisionFilter,
    upgrade,
)
from mooncake_core.conductor.audit.models import SCHEMA_REVISION
from mooncake_core.conductor.audit.records import CandidateRecord, DecisionRecord
from mooncake_core.conductor.calibration import PrefillTimings
from mooncake_core.config.models import ConductorConfig, HashingConfig

T0 = 1_800_000_000.0


def _conductor() -> Conductor:
    c = Conductor(
        ConductorConfig(policy="kvcache_centric", admission="none"),
        ["p0"],
        {"d0": 4},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        decode_model=DecodeStepModel((0.01, 0.01, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )
    c.set_decode_kv("d0", capacity_tokens=4096, used_tokens=512)
    return c


def test_a_calibrated_decision_round_trips_and_explains(db_url: str) -> None:
    c = _conductor()
    for i in range(300):  # the cluster is 3x the profile, plus 20 ms outside the instance
        rid = f"w{i}"
        n = (20, 50, 80)[i % 3]
        c.schedule(ScheduleRequest(rid, (), n, 4), float(i))
        comp = 0.003 * n
        c.on_actual(rid, comp + 0.02, timings=PrefillTimings(0.0, 0.0, comp))
        c.cancel(rid)
    d = c.schedule(ScheduleRequest("x", (), 60, 4), T0)
    assert d.model_ttft_s == pytest.approx(0.060)
    assert d.predicted_ttft_s == pytest.approx(0.200, rel=2e-3)
    w = AuditWriter.open(db_url)
    w.submit_source(d)
    w.update_actual("x", 0.21, None)
    w.close()
    with AuditReader.open(db_url) as r:
        entry = r.get("x")
        text = r.explain("x")
    assert entry is not None and text is not None
    rec = entry.decision
    assert rec.model_ttft_s == pytest.approx(0.060)
    assert rec.predicted_overhead_s == pytest.approx(0.020, rel=2e-3)
    pre, dec = entry.candidates
    assert pre.overhead_time_s == pytest.approx(0.020, rel=2e-3)
    assert (pre.kv_tokens, pre.kv_capacity_tokens, pre.kv_reported_tokens) == (None, None, None)
    assert (dec.overhead_time_s, dec.kv_tokens, dec.kv_capacity_tokens) == (None, 0, 4096)
    assert dec.kv_reported_tokens == 512
    assert "plus 20 ms outside the instance (dispatch, RPCs)" in text
    assert "(KV: 0 of 4096 tokens counted by the Conductor, 512 in use per its worker)" in text
    assert "Measured TTFT 0.21 s against 0.20 s predicted (error +10 ms, 5%)" in text
    assert "Uncalibrated, the models predicted 60 ms (error +0.15 s, 71%)" in text


def test_explain_says_nothing_of_calibration_when_it_changed_nothing(db_url: str) -> None:
    d = _conductor().schedule(ScheduleRequest("y", (), 60, 4), T0)
    assert d.model_ttft_s == d.predicted_ttft_s
    w = AuditWriter.open(db_url)
    w.submit_source(d)
    w.close()
    with AuditReader.open(db_url) as r:
        text = r.explain("y")
    assert text is not None
    assert "Uncalibrated" not in text and "outside the instance" not in text


def _rec(rid: str, t: float, pred: float, model: float | None, actual: float) -> DecisionRecord:
    return DecisionRecord(
        time=t,
        request_id=rid,
        prompt_tokens=10,
        prompt_blocks=1,
        policy="kvcache_centric",
        chosen_prefill="p0",
        chosen_decode="d0",
        predicted_ttft_s=pred,
        model_ttft_s=model,
        actual_ttft_s=actual,
    )


def test_stats_quantiles_of_the_relative_error_nearest_rank(db_url: str) -> None:
    # Ten measured decisions with relative errors 0.0, 0.1, ..., 0.9 (actual 1 s); the
    # uncalibrated prediction is off by 2x the same amount, recorded on the first five only.
    w = AuditWriter.open(db_url)
    for i in range(10):
        model = 1.0 - 0.2 * i if i < 5 else None
        w.submit(
            _rec(f"r{i}", T0 + i, 1.0 - 0.1 * i, model, 1.0),
            [CandidateRecord(instance="p0", role="prefill")],
        )
    w.submit(_rec("no-actual", T0 + 20, 1.0, 1.0, 0.0), [])  # actual 0: no relative error
    w.close()
    with AuditReader.open(db_url) as r:
        st = r.stats(3600.0)
        late = r.stats(3600.0, DecisionFilter(since=T0 + 5))
    assert st.ttft_rel_p50 == pytest.approx(0.4)  # rank ceil(0.5 * 10) = 5
    assert st.ttft_rel_p90 == pytest.approx(0.8)  # rank 9
    assert st.model_measured == 5
    assert st.model_ttft_rel_p50 == pytest.approx(0.4)  # 0, .2, .4, .6, .8: rank 3
    assert st.model_ttft_rel_p90 == pytest.approx(0.8)
    assert late.ttft_rel_p50 == pytest.approx(0.7) and late.model_measured == 0
    assert late.model_ttft_rel_p50 is None


def test_upgrade_from_0003_keeps_rows_and_downgrade_drops_the_columns(tmp_path: Path) -> None:
    from alembic.config import main as alembic_main

    db = tmp_path / "audit.db"
    url = f"sqlite:///{db}"
    upgrade(url, "0003")
    con = sqlite3.connect(db)
    con.execute(
        "INSERT INTO decisions (id, time, request_id, prompt_tokens, prompt_blocks, "
        "block_key_count, policy, admitted, migration_blocks, predicted_ttft_s, "
        "actual_ttft_s, outcome) VALUES (1, 1800000000.0, 'old', 10, 1, 1, 'kvcache_centric', "
        "1, 0, 0.1, 0.2, 'completed')"
    )
    con.execute(
        "INSERT INTO candidates (decision_id, instance, role, matched_prefix_blocks, "
        "queue_time_s, transfer_time_s, prefill_time_s, chosen, transfer_blocks) VALUES "
        "(1, 'd0', 'decode', 0, 0, 0, 0, 1, 0)"
    )
    con.commit()
    con.close()
    assert upgrade(url).current == SCHEMA_REVISION
    with AuditReader.open(url) as r:
        entry = r.get("old")
        st = r.stats(60.0)
    assert entry is not None
    assert (entry.decision.model_ttft_s, entry.decision.predicted_overhead_s) == (None, None)
    assert entry.candidates[0].kv_tokens is None
    assert st.ttft_rel_p50 == pytest.approx(0.5) and st.model_measured == 0
    repo = Path(__file__).resolve().parents[3]
    alembic_main(["-c", str(repo / "alembic.ini"), "-x", f"url={url}", "downgrade", "0003"])
    con = sqlite3.connect(db)
    dcols = [r[1] for r in con.execute("PRAGMA table_info(decisions)")]
    ccols = [r[1] for r in con.execute("PRAGMA table_info(candidates)")]
    rows = con.execute("SELECT request_id, actual_ttft_s FROM decisions").fetchall()
    ncand = con.execute("SELECT count(*) FROM candidates").fetchone()[0]
    con.close()
    assert "model_ttft_s" not in dcols and "kv_tokens" not in ccols
    assert rows == [("old", 0.2)] and ncand == 1
