"""The Conductor facade: decode choice, queue accounting through the hooks, records."""

from __future__ import annotations

import pytest

from mooncake_core.conductor import (
    BlockStored,
    Conductor,
    ConductorOptions,
    DecodeStepModel,
    NetworkModel,
    PrefillTimeModel,
    ScheduleRequest,
    Tier,
)
from mooncake_core.config.models import ClusterConfig, ConductorConfig, HashingConfig, ModelConfig

HBM, DRAM = Tier.HBM, Tier.DRAM


def make(
    policy: str = "kvcache_centric", decode: dict[str, int] | None = None, **cfg: object
) -> Conductor:
    return Conductor(
        ConductorConfig(policy=policy, admission="none", **cfg),  # type: ignore[arg-type]
        ["p0", "p1"],
        decode or {"d0": 4, "d1": 4},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        # 10 ms + 10 ms per request in the batch: TBT is easy to read off.
        decode_model=DecodeStepModel((0.01, 0.01, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )


def req(rid: str, keys: tuple[int, ...] = (), tokens: int = 10) -> ScheduleRequest:
    return ScheduleRequest(rid, keys, max(tokens, len(keys) * 10), 5)


def test_queue_time_follows_hooks() -> None:
    c = make("round_robin")
    c.schedule(req("a", tokens=100), 0.0)  # p0: 100 ms
    c.schedule(req("b", tokens=50), 0.0)  # p1: 50 ms
    c.schedule(req("c", tokens=30), 0.0)  # p0 again, behind a
    assert [p.queue_time_s for p in c.snapshot(0.0).prefill] == [
        pytest.approx(0.130),
        pytest.approx(0.050),
    ]
    c.on_prefill_start("a", 1.0)
    # a runs until 1.1; c (30 ms) still queued.
    assert c.snapshot(1.04).prefill[0].queue_time_s == pytest.approx(0.060 + 0.030)
    c.on_prefill_done("a", 1.1)
    assert c.snapshot(1.1).prefill[0].queue_time_s == pytest.approx(0.030)
    assert c.snapshot(1.1).prefill[0].queued == 1


def test_decode_choice_lowest_tbt_meeting_slo() -> None:
    c = make("round_robin", decode={"d0": 4, "d1": 2}, tbt_slo_s=0.035)
    for rid, inst in (("x", "d1"), ("y", "d0"), ("z", "d0")):
        c.schedule(req(rid), 0.0)
        c.on_prefill_start(rid, 0.0)
        c.on_prefill_done(rid, 0.01)
        c._decode_by_name[inst].join(rid, 10, 0.0)
        c._decode_by_name[c._tracked[rid].decode or ""].unreserve(rid)
    # d0: 2 decoding -> 40 ms if joined (> 35 ms SLO); d1: 1 -> 30 ms.
    d = c.schedule(req("n"), 0.0)
    assert d.decode == "d1"
    assert d.predicted_tbt_s == pytest.approx(0.030)
    rows = {x.instance: x for x in d.candidates if x.role == "decode"}
    assert rows["d0"].why_not == "predicted TBT 40.0ms > SLO 35.0ms"
    assert rows["d1"].chosen


def test_decode_choice_falls_back_to_lowest_tbt_when_none_meets_slo() -> None:
    c = make("round_robin", tbt_slo_s=0.015)
    d = c.schedule(req("n"), 0.0)
    assert d.decode == "d0" and d.predicted_tbt_s == pytest.approx(0.020)


def test_burst_spreads_over_decode_instances_by_reservation() -> None:
    c = make("round_robin")
    assert [c.schedule(req(f"r{i}"), 0.0).decode for i in range(4)] == ["d0", "d1", "d0", "d1"]


def test_join_moves_to_another_decode_instance_with_room() -> None:
    c = make("round_robin", decode={"d0": 1, "d1": 1, "d2": 1})
    assert c.schedule(req("a"), 0.0).decode == "d0"
    assert c.schedule(req("b"), 0.0).decode == "d1"
    c._decode_by_name["d1"].join("other", 10, 0.0)  # d1 filled up meanwhile
    c.on_prefill_start("b", 0.0)
    c.on_prefill_done("b", 0.01)
    assert c.on_decode_join("b", 0.02).instance == "d2"


def test_cancel_releases_everything() -> None:
    c = make()
    c.apply(BlockStored("p1", HBM, (1, 2, 3)))
    c._prefill_by_name["p1"].enqueue("busy", 1.0)
    d = c.schedule(req("a", (1, 2, 3, 4)), 0.0)
    assert d.prefill == "p0" and d.migration is not None
    assert c.index.match([1, 2, 3]).by_location["p0"] == 3
    assert c.cancel("a")
    assert "p0" not in c.index.match([1, 2, 3]).by_location
    snap = c.snapshot(0.0)
    assert snap.in_flight == 0 and snap.prefill[0].queued == 0 and snap.decode[0].reserved == 0
    assert not c.cancel("a")


def test_bad_requests_leave_state_alone() -> None:
    c = make()
    c.schedule(req("a"), 0.0)
    before = c.snapshot(0.0)
    with pytest.raises(ValueError, match="already in flight"):
        c.schedule(req("a"), 0.0)
    with pytest.raises(ValueError, match="exceed input_len"):
        c.schedule(ScheduleRequest("b", (1, 2), 15, 1), 0.0)
    with pytest.raises(ValueError):
        ScheduleRequest("", (), 1)
    with pytest.raises(KeyError, match="not in flight"):
        c.on_prefill_start("zzz", 0.0)
    assert c.snapshot(0.0) == before


def test_prefill_done_caches_prompt_on_instance() -> None:
    c = make("round_robin")
    c.schedule(req("a", (7, 8)), 0.0)
    c.on_prefill_start("a", 0.0)
    c.on_prefill_done("a", 0.02)
    assert c.index.keys_of("p0", HBM) == frozenset({7, 8})


def test_actual_errors_in_snapshot() -> None:
    c = make("round_robin")
    d = c.schedule(req("a", tokens=100), 0.0)
    c.on_prefill_start("a", 0.0)
    c.on_prefill_done("a", 0.1)
    c.on_decode_join("a", 0.1)
    c.on_decode_done("a", 1.0)
    c.on_actual("a", d.predicted_ttft_s + 0.05, d.predicted_tbt_s - 0.002)
    c.on_actual("unknown", 1.0, 1.0)
    snap = c.snapshot()
    assert snap.ttft_mae_s == pytest.approx(0.05) and snap.ttft_bias_s == pytest.approx(0.05)
    assert snap.tbt_mae_s == pytest.approx(0.002)


def test_same_inputs_same_decisions() -> None:
    def run() -> list[tuple[str, str, float]]:
        c = make("random")
        c.apply(BlockStored("p0", HBM, (1, 2)))
        return [
            (d.prefill, d.decode, d.predicted_ttft_s)
            for d in (c.schedule(req(f"r{i}", (1, 2, 3 + i)), i * 0.01) for i in range(10))
        ]

    assert run() == run()


def test_to_record_maps_every_audit_field() -> None:
    c = make()
    c.apply(BlockStored("store-0", DRAM, (0xABC, 2)))
    d = c.schedule(req("a", (0xABC, 2, 3)), 12.5)
    rec, rows = d.to_record()
    assert (rec.time, rec.request_id, rec.prompt_tokens, rec.prompt_blocks) == (12.5, "a", 30, 3)
    assert rec.first_block_key == "0000000000000abc" and rec.block_key_count == 3
    assert (rec.policy, rec.chosen_prefill, rec.chosen_decode) == ("kvcache_centric", "p0", "d0")
    assert rec.predicted_ttft_s == d.predicted_ttft_s and rec.admitted and rec.reject_reason is None
    assert (rec.migration_source, rec.migration_blocks) == ("store-0", 2)
    assert [(r.role, r.instance, r.chosen) for r in rows] == [
        ("prefill", "p0", True),
        ("prefill", "p1", False),
        ("decode", "d0", True),
        ("decode", "d1", False),
    ]
    assert rows[0].transfer_blocks == 2 and rows[0].why_not is None
    assert rows[1].why_not is not None and rows[2].predicted_ttft_s is None
    assert d.runner_up() is not None and d.runner_up().instance == "p1"  # type: ignore[union-attr]
    assert d.to_record(time=99.0)[0].time == 99.0


def test_rejection_record_has_reason_and_retry() -> None:
    c = Conductor(
        ConductorConfig(policy="round_robin", admission="early_reject", ttft_slo_s=0.15),
        ["p0"],
        {"d0": 4},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
    )
    assert c.schedule(req("a", tokens=100), 0.0).admitted  # 0.1 s alone
    d = c.schedule(req("b", tokens=100), 0.0)  # 0.1 s behind a's 0.1 s
    assert not d.admitted and d.migration is None
    rec, _ = d.to_record()
    assert rec.reject_reason is not None and rec.reject_reason.startswith(
        "ttft_slo: predicted TTFT 0.200s"
    )
    assert rec.retry_after_s == pytest.approx(0.5)  # 50 ms excess, raised to the 0.5 s floor
    assert c.snapshot().rejected == (("ttft_slo", 1),)


def test_from_cluster_uses_workers_and_hashing() -> None:
    c = Conductor.from_cluster(ClusterConfig(model=ModelConfig()))
    assert [p.name for p in c.snapshot().prefill] == ["prefill-0"]
    assert [(d.name, d.max_batch) for d in c.snapshot().decode] == [("decode-0", 8)]
    assert c.block_size == 16 and c.policy.name == "kvcache_centric"


def test_constructor_rejects_bad_clusters() -> None:
    with pytest.raises(ValueError, match="at least one prefill"):
        Conductor(ConductorConfig(), [], {"d": 1})
    with pytest.raises(ValueError, match="duplicate prefill"):
        Conductor(ConductorConfig(), ["a", "a"], {"d": 1})


def test_candidate_table_is_built_once_and_compares_by_rows() -> None:
    c = make("load_balance")
    c._prefill_by_name["p0"].enqueue("busy", 0.5)
    d = c.schedule(req("a"), 0.0)
    rows = d.candidates.rows()
    assert d.candidates.rows() is rows
    assert len(d.candidates) == 4 and d.candidates[0] is rows[0] and d.candidates == rows
    assert d.candidates[0].why_not == "queue 0.500s > 0.000s"
    # The table reflects the state at decision time, not later changes.
    c2 = make("load_balance")
    c2._prefill_by_name["p0"].enqueue("busy", 0.5)
    d2 = c2.schedule(req("a"), 0.0)
    c2.schedule(req("b"), 0.0)
    c2.schedule(req("c"), 0.0)
    assert d2.candidates == d.candidates


def test_remove_prefill_returns_its_requests_and_drops_its_cache() -> None:
    c = make("round_robin")
    c.apply(BlockStored("p1", HBM, (1, 2)))
    c.schedule(req("a"), 0.0)  # p0
    c.schedule(req("b", (1, 2)), 0.0)  # p1
    c.schedule(req("x"), 0.0)  # p0
    c.schedule(req("y"), 0.0)  # p1, prefilled before p1 goes away
    c.on_prefill_start("y", 0.0)
    c.on_prefill_done("y", 0.01)
    assert c.remove_prefill("p1") == ["b"]
    assert c.on_decode_join("y", 0.02).admitted
    assert c.index.match([1, 2]).best_len == 0
    assert [p.name for p in c.snapshot().prefill] == ["p0"]
    assert c.schedule(req("b", (1, 2)), 0.0).prefill == "p0"
    c.add_prefill("p9")
    assert c.schedule(req("c"), 0.0).prefill == "p9"
    with pytest.raises(ValueError, match="already exists"):
        c.add_prefill("p9")
    with pytest.raises(KeyError):
        c.remove_prefill("nope")


def test_remove_decode_moves_reservations_and_returns_lost_streams() -> None:
    c = make("round_robin", decode={"d0": 4, "d1": 4})
    for rid in ("a", "b"):
        c.schedule(req(rid), 0.0)
        c.on_prefill_start(rid, 0.0)
        c.on_prefill_done(rid, 0.01)
    assert c.on_decode_join("a", 0.01).instance == "d0"
    with pytest.raises(ValueError, match="already joined"):
        c.on_decode_join("a", 0.02)
    c.schedule(req("c"), 0.0)  # reserves d1 (d0 has a)
    c.on_prefill_start("c", 0.0)
    c.on_prefill_done("c", 0.01)
    assert c.remove_decode("d0") == ["a"]
    assert c.on_decode_join("b", 0.02).instance == "d1"
    assert c.on_decode_join("c", 0.02).instance == "d1"
    c.remove_decode("d1")
    with pytest.raises(ValueError, match="no prefill or no decode"):
        c.schedule(req("d"), 0.0)
    c.add_decode("d2", 1)
    assert c.schedule(req("d"), 0.0).decode == "d2"


def test_resync_due_tracks_each_location() -> None:
    c = make(resync_interval_s=30.0)
    c.apply(BlockStored("store-0", DRAM, (1,)))
    assert c.resync_due(0.0) == ["p0", "p1", "store-0"]
    c.resync("p0", HBM, [5], now=0.0)
    c.resync("store-0", DRAM, [1, 2], now=10.0)
    assert c.resync_due(29.0) == ["p1"]
    assert c.resync_due(30.0) == ["p0", "p1"]
    assert c.snapshot().index.drift_added == 2
