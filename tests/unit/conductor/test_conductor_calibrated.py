"""The Conductor with online calibration: what it learns from on_actual and where it uses it."""

from __future__ import annotations

import pytest

from mooncake_core.conductor import (
    Conductor,
    ConductorOptions,
    DecodeStepModel,
    NetworkModel,
    PrefillTimeModel,
    ScheduleRequest,
)
from mooncake_core.conductor.calibration import PrefillTimings
from mooncake_core.config.models import ConductorConfig, HashingConfig


def make(calibrate: bool = True, policy: str = "kvcache_centric") -> Conductor:
    return Conductor(
        ConductorConfig(policy=policy, admission="none", calibrate=calibrate),  # type: ignore[arg-type]
        ["p0", "p1"],
        {"d0": 4},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),  # 1 ms per new token
        decode_model=DecodeStepModel((0.01, 0.01, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )


def req(rid: str, tokens: int) -> ScheduleRequest:
    return ScheduleRequest(rid, (), tokens, 5)


def serve(c: Conductor, rid: str, tokens: int, now: float, scale: float, outside: float) -> None:
    """One request through the hooks, measured ``scale`` times the model plus ``outside``."""
    d = c.schedule(req(rid, tokens), now)
    compute = scale * 0.001 * tokens
    c.on_prefill_start(rid, now)
    c.on_prefill_done(rid, now + compute)
    c.on_actual(rid, compute + outside, timings=PrefillTimings(0.0, 0.0, compute))
    c.on_decode_join(rid, now + compute)
    c.on_decode_done(rid, now + compute + 0.1)
    assert d.admitted


def test_without_samples_calibration_changes_nothing() -> None:
    on, off = make(True), make(False)
    for i, n in enumerate((100, 30, 70, 10)):
        a = on.schedule(req(f"r{i}", n), 0.0)
        b = off.schedule(req(f"r{i}", n), 0.0)
        assert (a.prefill, a.predicted_ttft_s, a.predicted_queue_s) == (
            b.prefill,
            b.predicted_ttft_s,
            b.predicted_queue_s,
        )
        assert a.model_ttft_s == a.predicted_ttft_s and a.predicted_overhead_s == 0.0


def test_learns_scale_and_overhead_and_predicts_with_them() -> None:
    c = make(policy="round_robin")
    t = 0.0
    for i in range(600):  # measured: 3x the profile, plus 20 ms outside the instance
        serve(c, f"w{i}", (20, 50, 80)[i % 3], t, 3.0, 0.020)
        t += 1.0
    d = c.schedule(req("x", 60), t)
    assert d.predicted_prefill_s == pytest.approx(0.180, rel=1e-3)
    assert d.predicted_overhead_s == pytest.approx(0.020, rel=1e-3)
    assert d.predicted_ttft_s == pytest.approx(0.200, rel=1e-3)
    assert d.model_ttft_s == pytest.approx(0.060)  # what the profile alone says
    # The queue is in calibrated units: the next request on the same instance waits 180 ms
    # under the calibration, 60 ms under the model.
    c.schedule(req("y", 10), t)  # round robin: the other instance
    e = c.schedule(req("z", 10), t)
    assert e.prefill == d.prefill
    assert e.predicted_queue_s == pytest.approx(0.180, rel=1e-3)
    assert e.model_ttft_s == pytest.approx(0.060 + 0.010)
    snap = c.snapshot().calibration
    assert snap is not None and snap.compute.samples == 600
    assert snap.compute.slope == pytest.approx(3.0, rel=3e-3)
    assert [(i.instance, i.compute.samples, i.compute.factor) for i in snap.instances] == [
        ("p0", 300, 1.0),
        ("p1", 300, 1.0),
    ]


def test_each_instance_learns_its_own_speed() -> None:
    c = make(policy="round_robin")
    t = 0.0
    for i in range(200):
        d = c.schedule(req(f"w{i}", 50), t)
        scale = 1.0 if d.prefill == "p0" else 2.0
        c.on_prefill_start(d.request_id, t)
        c.on_prefill_done(d.request_id, t + scale * 0.05)
        c.on_actual(d.request_id, scale * 0.05, timings=PrefillTimings(0.0, 0.0, scale * 0.05))
        c.on_decode_join(d.request_id, t)
        c.on_decode_done(d.request_id, t)
        t += 1.0
    cands = {x.instance: x for x in c.schedule(req("x", 50), t).candidates if x.role == "prefill"}
    # Within 1%: the factor is shrunk by its standard error, which is never quite 0.
    assert cands["p0"].prefill_s == pytest.approx(0.05, rel=1e-2)
    assert cands["p1"].prefill_s == pytest.approx(0.10, rel=1e-2)
    # kvcache_centric compares calibrated predictions: the fast instance wins.
    k = make()
    k.calibration = c.calibration
    assert k.schedule(req("y", 50), t).prefill == "p0"


def test_the_reused_prefix_reported_is_what_the_compute_fit_learns_from() -> None:
    c = make()
    for i in range(100):
        rid = f"w{i}"
        c.schedule(req(rid, 100), float(i))
        # The plan expected no reuse (100 ms model); the worker reused 90 tokens and
        # computed 10 in 10 ms: the model was right, the index was stale.
        c.on_actual(rid, 0.01, timings=PrefillTimings(0.0, 0.0, 0.01, reused_tokens=90))
        c.cancel(rid)
    assert c.calibration is not None
    cal = c.calibration.get("p0")
    assert cal is not None and cal.compute_s(0.1) == pytest.approx(0.1, rel=1e-3)


def test_ttft_is_learned_and_counted_once() -> None:
    c = make()
    c.schedule(req("a", 50), 0.0)
    timings = PrefillTimings(0.0, 0.0, 0.1)
    c.on_actual("a", 0.1, timings=timings)
    c.on_actual("a", 0.1, timings=timings)  # a duplicate report teaches nothing more
    c.on_actual("a", None, 0.02)
    assert c.calibration is not None
    assert c.calibration.snapshot().compute.samples == 1
    assert c.snapshot().ttft_mae_s == pytest.approx(0.05)  # both TTFT reports counted
    c.cancel("a")
    c.on_actual("a", 0.1, timings=timings)  # after it finished: nothing left to learn
    assert c.calibration.snapshot().compute.samples == 1


def test_without_calibration_on_actual_only_tallies() -> None:
    c = make(calibrate=False)
    c.schedule(req("a", 50), 0.0)
    c.on_actual("a", 0.5, timings=PrefillTimings(0.0, 0.0, 0.5))
    assert c.calibration is None and c.snapshot().calibration is None
    assert c.schedule(req("b", 50), 0.0).predicted_prefill_s == pytest.approx(0.05)


def test_decode_kv_capacity_and_reported_use_reach_the_candidates() -> None:
    c = make()
    c.set_decode_kv("d0", capacity_tokens=120, used_tokens=64)
    d = c.schedule(req("a", 100), 0.0)
    dec = next(x for x in d.candidates if x.role == "decode")
    assert (dec.kv_tokens, dec.kv_capacity_tokens, dec.kv_reported_tokens) == (0, 120, 64)
    e = c.schedule(req("b", 50), 0.0)
    dec = next(x for x in e.candidates if x.role == "decode")
    assert (dec.kv_tokens, dec.kv_capacity_tokens) == (100, 120)  # a's reservation
    snap = c.snapshot().decode[0]
    assert (snap.kv_capacity_tokens, snap.reported_kv_tokens) == (120, 64)
    with pytest.raises(ValueError):
        c.set_decode_kv("d0", capacity_tokens=0)
    with pytest.raises(KeyError):
        c.set_decode_kv("nope", used_tokens=1)
