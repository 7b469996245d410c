"""Predictors: fitting recovers known coefficients; save/load; network transfer times."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from mooncake_core.conductor import (
    DecodeStepModel,
    NetworkModel,
    PrefillPoint,
    PrefillTimeModel,
    StepPoint,
    Tier,
)

TRUE_PREFILL = (0.03, 2.0e-4, 4.0e-9, 3.0e-9)


def _prefill_points(noise: float = 0.0) -> list[PrefillPoint]:
    rng = np.random.default_rng(0)
    points = []
    for n_in, frac in itertools.product([512, 2048, 8192, 16384, 32768], [0.0, 0.25, 0.5, 0.9]):
        p = int(n_in * frac)
        n = n_in - p
        c0, c1, c2, c3 = TRUE_PREFILL
        t = c0 + c1 * n + c2 * n * p + c3 * n * n
        points.append(PrefillPoint(n_in, p, t * (1 + noise * rng.standard_normal())))
    return points


def test_prefill_fit_recovers_coefficients() -> None:
    model = PrefillTimeModel.fit(_prefill_points())
    assert np.allclose(model.coefficients, TRUE_PREFILL, rtol=1e-6)
    assert model.report is not None
    assert model.report.points == 20
    assert model.report.r2 == pytest.approx(1.0)
    assert model.report.mape < 1e-9


def test_prefill_fit_reports_error_on_noisy_profile() -> None:
    model = PrefillTimeModel.fit(_prefill_points(noise=0.05))
    assert model.report is not None
    assert 0.9 < model.report.r2 < 1.0
    assert 0.005 < model.report.mape < 0.2


def test_prefill_predict_shape() -> None:
    model = PrefillTimeModel(TRUE_PREFILL)
    assert model.predict(1000, 0) == pytest.approx(0.03 + 0.2 + 0.003)
    # n=500 new tokens over p=500 cached: 0.03 + 500*(2e-4 + 4e-9*500 + 3e-9*500)
    assert model.predict(1000, 500) == pytest.approx(0.03 + 500 * (2e-4 + 3.5e-6))
    assert model.predict(1000, 5000) == pytest.approx(0.03)  # prefix clamped to input
    assert PrefillTimeModel((-1.0, 0, 0, 0)).predict(10, 0) == 0.0


def test_prefill_save_load_roundtrip(tmp_path: Path) -> None:
    model = PrefillTimeModel.fit(_prefill_points())
    path = tmp_path / "prefill.json"
    model.save(path)
    again = PrefillTimeModel.load(path)
    assert again.coefficients == model.coefficients
    assert again.report == model.report
    with pytest.raises(ValueError, match="not a prefill model"):
        PrefillTimeModel.from_json(DecodeStepModel((1, 2, 3)).to_json())


def test_fit_rejects_bad_profiles() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        PrefillTimeModel.fit(_prefill_points()[:3])
    with pytest.raises(ValueError, match="prefix_len"):
        PrefillTimeModel.fit([PrefillPoint(10, 20, 1.0)] * 4)
    with pytest.raises(ValueError, match="4 finite"):
        PrefillTimeModel((1.0, 2.0))


def test_decode_fit_recovers_coefficients_and_tbt() -> None:
    true = (0.015, 3.0e-4, 2.0e-8)
    pts = [
        StepPoint(b, c, true[0] + true[1] * b + true[2] * c)
        for b in (1, 4, 16, 64)
        for c in (b * 1000, b * 8000)
    ]
    model = DecodeStepModel.fit(pts)
    assert np.allclose(model.coefficients, true, rtol=1e-6)
    # Two requests with 10k context; a third with 5k joins.
    assert model.tbt_if_joined(2, 10_000, 5_000) == pytest.approx(0.015 + 3 * 3e-4 + 15_000 * 2e-8)
    assert DecodeStepModel.from_json(model.to_json()).coefficients == model.coefficients


def test_network_transfer_uses_bandwidth_and_backlog() -> None:
    net = NetworkModel(default_bandwidth_bps=1e9, latency_s=0.001)
    net.set_bandwidth("a", "nic0", 2e9)
    net.set_bandwidth("a", "nic1", 2e9)  # a: 4 GB/s over two NICs
    assert net.bandwidth("a") == 4e9
    # b (1 GB/s default) is the bottleneck.
    assert net.transfer_time("a", "b", 1e9, now=0.0) == pytest.approx(1.001)
    net.add_transfer("x", "b", 2e9, now=0.0)
    # b still has 2 GB queued at t=0, 1 GB at t=1, nothing at t=3.
    assert net.backlog("b", 1.0) == pytest.approx(1e9)
    assert net.transfer_time("a", "b", 1e9, now=1.0) == pytest.approx(2.001)
    assert net.transfer_time("a", "b", 1e9, now=3.0) == pytest.approx(1.001)
    net.observe_backlog("a", 8e9, now=3.0)
    assert net.transfer_time("a", "b", 1e9, now=3.0) == pytest.approx(0.001 + 9e9 / 4e9)
    assert net.transfer_time("a", "b", 0, now=3.0) == 0.0


def test_network_tier_read_rate_and_nic_loss() -> None:
    net = NetworkModel(default_bandwidth_bps=10e9, tier_read_bps={Tier.SSD: 2e9})
    assert net.transfer_time("s", "p", 4e9, 0.0, Tier.SSD) == pytest.approx(2.0)
    assert net.transfer_time("s", "p", 4e9, 0.0, Tier.DRAM) == pytest.approx(0.4)
    assert net.transfer_time("p", "p", 4e9, 0.0, Tier.SSD) == pytest.approx(2.0)
    net.set_bandwidth("p", "nic0", 1e9)
    net.set_bandwidth("p", "nic1", 1e9)
    net.remove_nic("p", "nic1")
    assert net.bandwidth("p") == 1e9
    with pytest.raises(ValueError, match="positive"):
        net.set_bandwidth("p", "nic0", 0)
    assert net.bandwidth("p") == 1e9


def test_physical_fit_is_nonnegative_relative_and_exact_when_it_can_be() -> None:
    # Exact data from non-negative coefficients: recovered exactly.
    truth = PrefillTimeModel((0.002, 1e-4, 0.0, 2e-8))
    pts = [PrefillPoint(n, p, truth.predict(n, p)) for n in (40, 80, 160, 320) for p in (0, n // 2)]
    fit = PrefillTimeModel.fit(pts, physical=True)
    assert fit.coefficients == pytest.approx(truth.coefficients, rel=1e-6, abs=1e-15)
    # Data a free fit bends down (a noisy long point): the physical fit keeps every
    # coefficient >= 0, so predictions grow with the prompt far beyond the profile.
    noisy = [*pts[:-1], PrefillPoint(320, 160, truth.predict(320, 160) * 0.6)]
    free = PrefillTimeModel.fit(noisy)
    phys = PrefillTimeModel.fit(noisy, physical=True)
    assert min(free.coefficients) < 0
    assert min(phys.coefficients) >= 0
    preds = [phys.predict(n, 0) for n in (100, 1000, 4000)]
    assert preds == sorted(preds) and preds[-1] > 10 * preds[0]
    with pytest.raises(ValueError, match="positive"):
        PrefillTimeModel.fit([*pts[:3], PrefillPoint(10, 0, 0.0)], physical=True)
