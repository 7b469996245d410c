"""The learned decode-duration forecast of early_reject_predictive, on exact numbers."""

from __future__ import annotations

import numpy as np
import pytest

from mooncake_core.conductor import AdmissionContext, DecodeInstanceState, make_admission
from mooncake_core.conductor.durations import DecodeDurations
from mooncake_core.conductor.options import ConductorOptions


def durations(*samples: float, min_samples: int = 1) -> DecodeDurations:
    d = DecodeDurations(window=8, min_samples=min_samples)
    for s in samples:
        d.add(s)
    return d


def test_survival_is_the_empirical_tail() -> None:
    d = durations(10.0, 20.0, 30.0, 40.0)
    assert d.survival(np.array([0.0, 10.0, 15.0, 40.0])).tolist() == [1.0, 0.75, 0.75, 0.0]


def test_keep_conditions_on_age_and_keeps_requests_older_than_every_sample() -> None:
    d = durations(10.0, 20.0, 30.0, 40.0)
    # age 15: S(15)=0.75, 10 s later S(25)=0.5 -> 2/3; age 5: S(5)=1, S(15)=0.75;
    # age 50: older than every sample -> stays.
    assert d.keep(np.array([15.0, 5.0, 50.0]), 10.0).tolist() == [pytest.approx(2 / 3), 0.75, 1.0]


def test_window_forgets_old_durations_and_readiness() -> None:
    d = DecodeDurations(window=2, min_samples=2)
    d.add(100.0)
    assert not d.ready
    d.add(1.0)
    d.add(2.0)
    assert d.ready and len(d) == 2
    assert d.survival(np.array([50.0])).tolist() == [0.0]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_duration_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="decode duration must be finite"):
        durations().add(bad)


def test_bad_window_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        DecodeDurations(0, 1)
    with pytest.raises(ValueError, match=r"min_samples must be in \[1, window=4\], got 5"):
        DecodeDurations(4, 5)
    with pytest.raises(ValueError, match="decode_duration_min_samples"):
        ConductorOptions(decode_duration_window=4, decode_duration_min_samples=9)


def _ctx(learned: DecodeDurations | None, ttft: float) -> AdmissionContext:
    # One instance, 4 slots, 1000 KV tokens; two requests decoding (joined at 0 and 8).
    d0 = DecodeInstanceState("d0", 4, kv_capacity_tokens=1000)
    d0.join("a", 300, 0.0)
    d0.join("b", 300, 8.0)
    return AdmissionContext(
        now=10.0,
        predicted_ttft_s=ttft,
        predicted_tbt_s=0.01,
        ttft_slo_s=100.0,
        tbt_slo_s=1.0,
        decode=[d0],
        prefill_finishes=(12.0,),
        decode_time_s=8.0,
        pending_joins=((12.0, 300),),
        request_tokens=150,
        durations=learned,
    )


def test_learned_forecast_keeps_the_long_runners_the_uniform_rule_drops() -> None:
    adm = make_admission("early_reject_predictive")
    # Uniform D=8 at t+10: both decoding requests gone (keep 0), the pending one (joins
    # at 12, leaves at 20) counts: 300 + 150 = 450 tokens of 1000 -> admitted.
    assert adm.before_prefill(_ctx(None, ttft=10.0)).admitted
    # Learned: half the decodes take 5 s, half 100 s. "a" (age 10) has outlived the short
    # ones: keep S(20)/S(10) = 1; "b" (age 2): S(12)/S(2) = 0.5; pending (joined 8 s
    # before t_f): S(8) = 0.5. Tokens 300 + 150 + 150 + 150 = 750; requests 1 + 0.5 +
    # 0.5 + 1 = 3 of 4 slots -> 0.75: still admitted at threshold 1.
    learned = durations(5.0, 5.0, 100.0, 100.0)
    assert adm.before_prefill(_ctx(learned, ttft=10.0)).admitted
    # One more long runner decoding pushes the learned forecast over the limit.
    c = _ctx(learned, ttft=10.0)
    c.decode[0].join("c", 300, 1.0)
    r = adm.before_prefill(c)
    assert not r.admitted and r.reason == "decode_load_predicted"
    assert "learned durations" in r.detail
    # The uniform rule, same state, still admits (it calls a, b and c finished).
    c2 = _ctx(None, ttft=10.0)
    c2.decode[0].join("c", 300, 1.0)
    assert adm.before_prefill(c2).admitted


def test_not_ready_falls_back_to_uniform_rule() -> None:
    adm = make_admission("early_reject_predictive")
    cold = durations(100.0, min_samples=2)
    c = _ctx(cold, ttft=10.0)
    c.decode[0].join("c", 300, 1.0)
    assert adm.before_prefill(c).admitted


def test_sorted_window_is_refreshed_every_window_over_32_samples() -> None:
    d = DecodeDurations(window=64, min_samples=1)  # refresh every 2 new samples
    d.add(10.0)
    d.add(10.0)
    assert d.survival(np.array([5.0])).tolist() == [1.0]
    d.add(1.0)  # one new sample: the sorted copy is kept
    assert d.survival(np.array([5.0])).tolist() == [1.0]
    d.add(1.0)  # the second: rebuilt, 2 of 4 above 5 s
    assert d.survival(np.array([5.0])).tolist() == [0.5]
