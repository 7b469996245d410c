"""Ground truth that differs from the predictor, and the Conductor's calibration learning it."""

from __future__ import annotations

import random

import pytest

from mooncake_core.conductor.predictors import DecodeStepModel, PrefillTimeModel
from mooncake_core.sim import CostModel, SimConfig, TraceRequest, set_field, simulate

B = 512


def linear_cost() -> CostModel:
    return CostModel(
        name="linear",
        prefill=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),  # 1 ms per new token
        decode=DecodeStepModel((0.1, 0.0, 0.0)),
        kv_bytes_per_token=1,
        layers=1,
        node_bandwidth_bps=1e15,
        local_cache_tokens=1_000_000,
        decode_kv_capacity_tokens=1_000_000,
        decode_max_batch=8,
    )


def config(calibrate: bool, p: int = 1, **truth: object) -> SimConfig:
    c = SimConfig(prefill_instances=p, decode_instances=1, simulate_decode=False, **truth)  # type: ignore[arg-type]
    c = set_field(c, "conductor.policy", "kvcache_centric")
    return set_field(c, "conductor.calibrate", calibrate)


def spaced(n: int, gap: float = 10.0, seed: int = 0) -> list[TraceRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        blocks = [10_000 * i + k for k in range(rng.randint(1, 4))]
        out.append(TraceRequest(i, gap * i, len(blocks) * B, 1, tuple(blocks)))
    return out


def test_truth_knobs_by_hand() -> None:
    # One request of 512 new tokens: 0.512 s by the profile; the truth is 1.5x slower
    # plus 50 ms outside the instance. The prediction was the profile's.
    trace = [TraceRequest(0, 0.0, B, 1, (1,))]
    res = simulate(
        trace, config(False, truth_prefill_scale=1.5, truth_overhead_s=0.05), linear_cost()
    )
    (r,) = res.requests
    assert r.ttft_s == pytest.approx(1.5 * 0.512 + 0.05, abs=1e-12)
    assert r.predicted_ttft_s == pytest.approx(0.512, abs=1e-12)


def test_spread_makes_instances_uneven() -> None:
    # Two instances, spread 0.5: instance 0 runs at 0.5x the profile's time, instance 1 at 1.5x.
    trace = [TraceRequest(i, 0.0, B, 1, (i + 1,)) for i in range(2)]
    res = simulate(trace, config(False, p=2, truth_prefill_spread=0.5), linear_cost())
    ttfts = sorted(r.ttft_s for r in res.requests)
    assert ttfts == [pytest.approx(0.256), pytest.approx(0.768)]


def test_exact_truth_leaves_the_predictions_exact() -> None:
    res = simulate(spaced(50), config(True), linear_cost())
    assert res.summary(30, 1).ttft_err_p90 == pytest.approx(0.0, abs=1e-9)


def test_calibration_learns_a_slower_noisy_cluster() -> None:
    truth = {"truth_prefill_scale": 2.0, "truth_prefill_noise": 0.1, "truth_overhead_s": 0.2}
    off = simulate(spaced(200), config(False, **truth), linear_cost()).summary(30, 1)
    on = simulate(spaced(200), config(True, **truth), linear_cost()).summary(30, 1)
    assert off.ttft_err_p50 > 0.5  # the profile says half the time, without the 0.2 s
    assert on.ttft_err_p50 < 0.1 and on.ttft_err_p90 < 0.2
    assert on.avg_ttft_s == pytest.approx(off.avg_ttft_s, rel=1e-9)  # one instance: same work


def test_calibration_steers_work_to_the_faster_instance() -> None:
    # Two instances, one 3x slower than the other, loaded to about 60%: knowing it, the
    # Conductor queues more on the fast one and the average TTFT drops by a fifth.
    # (Near saturation, per-request greedy placement with exact predictions is not
    # always better on average: docs/conductor.md, "Online calibration".)
    trace = spaced(300, gap=0.8, seed=1)
    truth = {"truth_prefill_spread": 0.5}
    off = simulate(trace, config(False, p=2, **truth), linear_cost()).summary(30, 1)
    on = simulate(trace, config(True, p=2, **truth), linear_cost()).summary(30, 1)
    assert on.ttft_err_p50 < 0.02 and on.ttft_err_p90 < 0.15 < 0.9 < off.ttft_err_p90
    assert on.avg_ttft_s < 0.85 * off.avg_ttft_s


def test_truth_knobs_are_validated() -> None:
    for bad in (
        {"truth_prefill_scale": 0.0},
        {"truth_prefill_spread": 1.0},
        {"truth_prefill_noise": -0.1},
        {"truth_overhead_s": -1.0},
    ):
        with pytest.raises(ValueError):
            SimConfig(**bad)  # type: ignore[arg-type]
