"""Decode KV capacity: room, load, admission on tokens, and joins that move the KV."""

from __future__ import annotations

import pytest

from mooncake_core.conductor import (
    AdmissionContext,
    Conductor,
    ConductorOptions,
    DecodeInstanceState,
    DecodeStepModel,
    PrefillTimeModel,
    ScheduleRequest,
    make_admission,
)
from mooncake_core.conductor.network import NetworkModel
from mooncake_core.config.models import ConductorConfig, HashingConfig


def test_room_and_load_count_slots_and_kv() -> None:
    d = DecodeInstanceState("d0", 4, kv_capacity_tokens=1000)
    assert d.has_room(5000)  # empty: always takes one request, however long
    d.join("a", 600, 0.0)
    assert d.has_room(400) and not d.has_room(401)
    assert d.load() == pytest.approx(0.6)  # KV binds: 600/1000 > 1/4
    assert d.load(extra_requests=3) == pytest.approx(1.0)  # slots bind: 4/4
    assert d.snapshot().kv_capacity_tokens == 1000
    assert d.snapshot().load == pytest.approx(0.6)


def test_without_kv_capacity_only_slots_count() -> None:
    d = DecodeInstanceState("d0", 2)
    d.join("a", 10**9, 0.0)
    assert d.has_room(10**9)
    assert d.load() == pytest.approx(0.5)
    d.join("b", 1, 0.0)
    assert not d.has_room()


def test_bad_kv_capacity_is_refused() -> None:
    with pytest.raises(ValueError, match="kv_capacity_tokens must be >= 1"):
        DecodeInstanceState("d0", 2, kv_capacity_tokens=0)


def ctx(decoders: list[DecodeInstanceState], **kw: object) -> AdmissionContext:
    base: dict[str, object] = {
        "now": 10.0,
        "predicted_ttft_s": 1.0,
        "predicted_tbt_s": 0.05,
        "ttft_slo_s": 5.0,
        "tbt_slo_s": 0.1,
        "decode": decoders,
        "prefill_finishes": (),
        "decode_time_s": 8.0,
    }
    base.update(kw)
    return AdmissionContext(**base)  # type: ignore[arg-type]


def test_early_reject_judges_kv_as_well_as_slots() -> None:
    d = DecodeInstanceState("d0", 100, kv_capacity_tokens=1000)
    d.join("a", 1000, 5.0)  # 1 of 100 slots, but all of the KV
    r = make_admission("early_reject").before_prefill(ctx([d]))
    assert (r.admitted, r.reason) == (False, "decode_full")
    assert "1 requests decoding (1000 context tokens)" in r.detail
    # Not full, but this request's prompt would not fit in what is left.
    half = DecodeInstanceState("d0", 100, kv_capacity_tokens=1000)
    half.join("a", 600, 5.0)
    assert make_admission("early_reject").before_prefill(ctx([half], request_tokens=400)).admitted
    r = make_admission("early_reject").before_prefill(ctx([half], request_tokens=401))
    assert (r.admitted, r.reason) == (False, "decode_full")
    # Same request count, no KV limit: admitted.
    free = DecodeInstanceState("d0", 100)
    free.join("a", 1000, 5.0)
    assert make_admission("early_reject").before_prefill(ctx([free])).admitted


def test_predictive_counts_pending_prompts_and_this_one() -> None:
    # Empty now; a pending prefill of 600 tokens lands at 10.5 and decodes until 18.5.
    # This request (500 tokens) would land at 11: 1100 tokens > 1000 of KV.
    d = DecodeInstanceState("d0", 100, kv_capacity_tokens=1000)
    adm = make_admission("early_reject_predictive")
    c = ctx([d], prefill_finishes=(10.5,), pending_joins=((10.5, 600),), request_tokens=500)
    r = adm.before_prefill(c)
    assert (r.admitted, r.reason) == (False, "decode_load_predicted")
    # Excess 0.1 of capacity drains at 0.6/8 per second.
    assert r.retry_after_s == pytest.approx(0.1 * 8 / 0.6)
    assert adm.before_prefill(
        ctx([d], prefill_finishes=(10.5,), pending_joins=((10.5, 600),), request_tokens=400)
    ).admitted
    # Without token information it counts requests only (the old behaviour): admitted.
    assert adm.before_prefill(ctx([d], prefill_finishes=(10.5,), request_tokens=500)).admitted


def make(admission: str, decode: dict[str, int | tuple[int, int | None]]) -> Conductor:
    return Conductor(
        ConductorConfig(policy="round_robin", admission=admission),  # type: ignore[arg-type]
        ["p0"],
        decode,
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        decode_model=DecodeStepModel((0.01, 0.0, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )


def prefill(c: Conductor, rid: str, tokens: int, at: float) -> None:
    c.schedule(ScheduleRequest(rid, (), tokens, 5), at)
    c.on_prefill_start(rid, at)
    c.on_prefill_done(rid, at + 0.01)


def test_decode_mapping_takes_kv_capacity_and_plain_ints() -> None:
    c = make("none", {"d0": (4, 1000), "d1": 4})
    snap = {d.name: d.kv_capacity_tokens for d in c.snapshot().decode}
    assert snap == {"d0": 1000, "d1": None}
    c.add_decode("d2", 8, kv_capacity_tokens=500)
    assert c.snapshot().decode[2].kv_capacity_tokens == 500


def test_decode_choice_skips_an_instance_whose_kv_is_reserved() -> None:
    c = make("none", {"d0": (4, 1000), "d1": (4, 1000)})
    assert c.schedule(ScheduleRequest("a", (), 900, 5), 0.0).decode == "d0"
    # d0 has 900 tokens reserved: a 200-token prompt no longer fits there.
    d = c.schedule(ScheduleRequest("b", (), 200, 5), 0.0)
    assert d.decode == "d1"
    rows = {x.instance: x.why_not for x in d.candidates if x.role == "decode"}
    assert rows["d0"] == "KV full (900 + 200 > 1000 tokens)"


def test_baseline_rejects_at_join_when_kv_is_full() -> None:
    c = make("baseline", {"d0": (4, 1000)})
    prefill(c, "a", 800, 0.0)
    assert c.on_decode_join("a", 0.02).admitted
    prefill(c, "b", 300, 0.1)
    r = c.on_decode_join("b", 0.2)
    assert (r.admitted, r.reason, r.streamed_to) == (False, "decode_full", "d0")
    assert dict(c.snapshot().rejected) == {"decode_full": 1}


def test_join_elsewhere_says_the_kv_must_move() -> None:
    c = make("baseline", {"d0": (4, 1000), "d1": (4, 1000)})
    c.schedule(ScheduleRequest("b", (), 300, 5), 0.0)
    assert c._tracked["b"].decode == "d0"
    c._decode_by_name["d0"].join("other", 800, 0.0)  # d0's KV filled up meanwhile
    c.on_prefill_start("b", 0.0)
    c.on_prefill_done("b", 0.3)
    r = c.on_decode_join("b", 0.31)
    assert (r.admitted, r.instance, r.streamed_to, r.moved) == (True, "d1", "d0", True)
    prefill(c, "c", 100, 1.0)
    r = c.on_decode_join("c", 1.1)
    assert (r.instance, r.streamed_to, r.moved) == (r.streamed_to, r.instance, False)


def test_placed_kv_joins_its_instance_even_when_the_estimate_says_full() -> None:
    # The live service: the worker reserved the blocks at Prepare, the KV is there.
    c = make("baseline", {"d0": (4, 1000), "d1": (4, 1000)})
    c.schedule(ScheduleRequest("b", (), 300, 5), 0.0)
    c._decode_by_name["d0"].join("other", 800, 0.0)
    c.on_prefill_start("b", 0.0)
    c.on_prefill_done("b", 0.3)
    r = c.on_decode_join("b", 0.31, placed=True)
    assert (r.admitted, r.instance, r.streamed_to, r.moved) == (True, "d0", "d0", False)
    assert {d.name: d.batch for d in c.snapshot().decode} == {"d0": 2, "d1": 0}
