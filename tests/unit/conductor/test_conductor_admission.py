"""Each admission variant's verdict on hand-built decode states."""

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
from mooncake_core.config.models import ConductorConfig, HashingConfig


def decode(name: str, max_batch: int, joined: list[float]) -> DecodeInstanceState:
    d = DecodeInstanceState(name, max_batch)
    for i, t in enumerate(joined):
        d.join(f"{name}-{i}", 100, t)
    return d


def ctx(
    decoders: list[DecodeInstanceState],
    ttft: float = 1.0,
    tbt: float = 0.05,
    finishes: tuple[float, ...] = (),
    now: float = 10.0,
    decode_time: float = 8.0,
    floor_ttft: float | None = None,
    floor_tbt: float | None = None,
) -> AdmissionContext:
    return AdmissionContext(
        floor_ttft_s=floor_ttft,
        floor_tbt_s=floor_tbt,
        now=now,
        predicted_ttft_s=ttft,
        predicted_tbt_s=tbt,
        ttft_slo_s=5.0,
        tbt_slo_s=0.1,
        decode=decoders,
        prefill_finishes=finishes,
        decode_time_s=decode_time,
    )


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown admission strategy 'maybe'"):
        make_admission("maybe")


@pytest.mark.parametrize("name", ["none", "baseline"])
def test_none_and_baseline_admit_before_prefill_even_when_full(name: str) -> None:
    full = [decode("d0", 2, [5.0, 6.0])]
    assert make_admission(name).before_prefill(ctx(full, ttft=100.0, tbt=1.0)).admitted


def test_early_reject_on_current_load_with_retry_hint() -> None:
    # Both slots busy; the first decode (joined at 5) ends at 5 + 8 = 13: retry in 3 s.
    r = make_admission("early_reject").before_prefill(ctx([decode("d0", 2, [5.0, 6.0])]))
    assert (r.admitted, r.reason, r.retry_after_s) == (False, "decode_full", 3.0)
    assert "2 requests decoding" in r.detail


def test_early_reject_on_slos() -> None:
    free = [decode("d0", 4, [])]
    r = make_admission("early_reject").before_prefill(ctx(free, ttft=7.5))
    assert (r.admitted, r.reason, r.retry_after_s) == (False, "ttft_slo", 2.5)
    r = make_admission("early_reject").before_prefill(ctx(free, tbt=0.2))
    assert (r.admitted, r.reason) == (False, "tbt_slo")
    assert make_admission("early_reject").before_prefill(ctx(free)).admitted


@pytest.mark.parametrize("name", ["early_reject", "early_reject_predictive"])
def test_slo_misses_that_waiting_cannot_clear_are_admitted(name: str) -> None:
    # The load makes the miss (floors within the SLOs): 429, retry later.
    free = [decode("d0", 4, [])]
    adm = make_admission(name)
    r = adm.before_prefill(ctx(free, ttft=7.5, floor_ttft=4.0))
    assert (r.admitted, r.reason) == (False, "ttft_slo")
    r = adm.before_prefill(ctx(free, tbt=0.2, floor_tbt=0.09))
    assert (r.admitted, r.reason) == (False, "tbt_slo")
    # The request alone on an idle cluster misses them (0.203 s TBT for a 0.1 s SLO, a
    # 6 s prefill for 5 s): a 429 could never clear, so it is admitted.
    assert adm.before_prefill(ctx(free, tbt=0.203, floor_tbt=0.203)).admitted
    assert adm.before_prefill(ctx(free, ttft=7.5, floor_ttft=6.0)).admitted


def test_predictive_admits_when_decode_will_have_drained() -> None:
    # Full now (2 of 2), but 2 requests with D = 8 s leave at 0.25/s: by t_f = now + 4.9
    # about 1.2 have left, so 0.775 + this one fits in 2 slots.
    full = [decode("d0", 2, [5.0, 6.0])]
    assert not make_admission("early_reject").before_prefill(ctx(full, ttft=4.9)).admitted
    assert make_admission("early_reject_predictive").before_prefill(ctx(full, ttft=4.9)).admitted
    # Sooner than that, not enough have left: 2 - 2*1/8 = 1.75, + 1 > 2.
    r = make_admission("early_reject_predictive").before_prefill(ctx(full, ttft=1.0))
    assert (r.admitted, r.reason) == (False, "decode_load_predicted")
    # The 0.75 excess drains at 1.75/8 per second.
    assert r.retry_after_s == pytest.approx(0.75 * 8 / 1.75)


def test_predictive_rejects_on_prefills_landing_before_this_one() -> None:
    # Decode is empty now (early_reject admits), but two admitted prefills finish at 10.5
    # and 11 and will decode until 18.5 and 19: at t_f = 11.5 both slots are taken.
    empty = [decode("d0", 2, [])]
    finishes = (10.5, 11.0)
    assert (
        make_admission("early_reject")
        .before_prefill(ctx(empty, ttft=1.5, finishes=finishes))
        .admitted
    )
    r = make_admission("early_reject_predictive").before_prefill(
        ctx(empty, ttft=1.5, finishes=finishes)
    )
    assert (r.admitted, r.reason) == (False, "decode_load_predicted")
    # One slot too many; two decoders leave at 2/8 per second: 4 s.
    assert r.retry_after_s == pytest.approx(4.0)
    # A prefill finishing after t_f does not occupy decode yet.
    later = (10.5, 12.0)
    assert (
        make_admission("early_reject_predictive")
        .before_prefill(ctx(empty, ttft=1.5, finishes=later))
        .admitted
    )


def test_predictive_counts_decodes_still_running() -> None:
    # 2 decoding, D = 8 s: by t_f = now + 4 one has left on average; one slot of two taken.
    d = [decode("d0", 2, [5.0, 8.0])]
    assert make_admission("early_reject_predictive").before_prefill(ctx(d, ttft=4.0)).admitted
    r = make_admission("early_reject_predictive").before_prefill(ctx(d, ttft=4.0, finishes=(12.0,)))
    assert r.reason == "decode_load_predicted"


def _conductor(admission: str) -> Conductor:
    return Conductor(
        ConductorConfig(policy="round_robin", admission=admission, ttft_slo_s=5.0, tbt_slo_s=0.1),  # type: ignore[arg-type]
        ["p0"],
        {"d0": 1},
        hashing=HashingConfig(block_size=4),
        prefill_model=PrefillTimeModel((0.1, 0.0, 0.0, 0.0)),
        decode_model=DecodeStepModel((0.01, 0.0, 0.0)),
        options=ConductorOptions(uniform_decode_time_s=10.0),
    )


def _run_to_decode(c: Conductor, rid: str, now: float) -> None:
    assert c.schedule(ScheduleRequest(rid, (), 4, 4), now).admitted
    c.on_prefill_start(rid, now)
    c.on_prefill_done(rid, now + 0.1)


def test_baseline_rejects_at_decode_join_when_full() -> None:
    c = _conductor("baseline")
    _run_to_decode(c, "a", 0.0)
    assert c.on_decode_join("a", 0.1).admitted
    _run_to_decode(c, "b", 1.0)
    j = c.on_decode_join("b", 1.1)
    assert (j.admitted, j.instance, j.reason) == (False, None, "decode_full")
    snap = c.snapshot()
    assert snap.rejected == (("decode_full", 1),)
    assert snap.in_flight == 1


def test_none_overflows_decode_batch() -> None:
    c = _conductor("none")
    _run_to_decode(c, "a", 0.0)
    _run_to_decode(c, "b", 0.0)
    assert c.on_decode_join("a", 0.1).admitted
    assert c.on_decode_join("b", 0.1).instance == "d0"
    assert c.snapshot().decode[0].batch == 2


def test_early_reject_through_conductor_and_decode_time_learning() -> None:
    c = _conductor("early_reject")
    _run_to_decode(c, "a", 0.0)
    c.on_decode_join("a", 0.1)
    d = c.schedule(ScheduleRequest("b", (), 4, 4), 1.0)
    # d0 is full until 0.1 + D (10 s): retry in 9.1 s.
    assert (d.admitted, d.reason, d.retry_after_s) == (False, "decode_full", pytest.approx(9.1))
    c.on_decode_done("a", 4.1)  # decoded for 4 s: D moves 5% of the way from 10 to 4
    assert c.snapshot().decode_time_s == pytest.approx(9.7)
    assert c.schedule(ScheduleRequest("b", (), 4, 4), 4.2).admitted
