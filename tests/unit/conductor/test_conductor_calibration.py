"""Online calibration: the affine RLS fit, exactly, and its robustness bounds."""

from __future__ import annotations

import math
import random

import pytest

from mooncake_core.conductor.calibration import (
    AffineFit,
    Calibration,
    CalibrationOptions,
    PrefillTimings,
    ShapeCurve,
    shrunk_factor,
)


def test_fresh_fit_predicts_the_model() -> None:
    f = AffineFit()
    assert (f.a, f.b, f.samples) == (0.0, 1.0, 0)
    assert f.predict(0.25) == 0.25
    assert f.predict(0.0) == 0.0


def test_first_sample_is_the_rls_step_by_hand() -> None:
    # x = 1, y = 3: s = max(1, 3) = 3, prior P0 = diag((1*3)^2, 1^2), f = (1/3, 1/3),
    # r = (3 - 1)/3; gain g = P0 f / (lam + f' P0 f), lam = 1 - 1/50.
    f = AffineFit(CalibrationOptions(memory=50))
    assert f.update(1.0, 3.0)
    lam = 0.98
    pf0, pf1 = 9.0 / 3, 1.0 / 3
    denom = lam + pf0 / 3 + pf1 / 3
    r = 2.0 / 3
    assert f.a == pytest.approx(pf0 / denom * r, rel=1e-12)
    assert f.b == pytest.approx(1.0 + pf1 / denom * r, rel=1e-12)
    assert f.samples == 1
    # The prediction at the sample moved more than half way to the measurement.
    assert 2.0 < f.predict(1.0) < 3.0


def test_converges_to_an_affine_truth_without_noise() -> None:
    f = AffineFit()
    xs = [0.001, 0.004, 0.02, 0.05, 0.1]
    for i in range(400):
        x = xs[i % len(xs)]
        f.update(x, 0.012 + 2.5 * x)
    # Exact up to what is left of the prior after 400 samples (it fades as lam^n).
    assert f.a == pytest.approx(0.012, rel=1e-4)
    assert f.b == pytest.approx(2.5, rel=1e-4)


def test_is_scale_free() -> None:
    # The same shape at 1000x the time scale gives the same relative fit.
    small, large = AffineFit(), AffineFit()
    rng = random.Random(3)
    for _ in range(60):
        x = rng.uniform(0.001, 0.01)
        y = (0.002 + 3 * x) * rng.uniform(0.9, 1.1)
        small.update(x, y)
        large.update(1000 * x, 1000 * y)
    assert large.a == pytest.approx(1000 * small.a, rel=1e-9)
    assert large.b == pytest.approx(small.b, rel=1e-9)


def _warm(noise: float = 0.1, n: int = 200, seed: int = 1) -> AffineFit:
    f = AffineFit()
    rng = random.Random(seed)
    for _ in range(n):
        x = rng.uniform(0.01, 0.1)
        f.update(x, (0.02 + 2 * x) * rng.uniform(1 - noise, 1 + noise))
    return f


def test_one_wild_sample_moves_a_warm_fit_little() -> None:
    for wild in (1000.0, 0.0, 1e-9):
        f = _warm()
        before = f.predict(0.05)
        f.update(0.05, before * wild)
        assert f.predict(0.05) == pytest.approx(before, rel=0.05), wild
        assert all(f.predict(x) >= 0 for x in (0.0, 0.001, 1.0, 100.0))


def test_follows_drift_within_a_few_memories() -> None:
    f = _warm(noise=0.0)
    assert f.predict(0.05) == pytest.approx(0.12, rel=1e-3)
    rng = random.Random(2)
    for i in range(300):  # the cluster became twice as slow
        x = rng.uniform(0.01, 0.1)
        f.update(x, 2 * (0.02 + 2 * x))
        if i + 1 == 150:  # 3 memories
            assert f.predict(0.05) == pytest.approx(0.24, rel=0.15)
    assert f.predict(0.05) == pytest.approx(0.24, rel=0.03)


def test_a_large_underprediction_is_corrected_in_a_few_samples() -> None:
    # The live symptom: predicted 2-4 ms, measured 10-250 ms (mostly overhead + scale).
    f = AffineFit()
    rng = random.Random(5)
    errs = []
    for _ in range(20):
        x = rng.uniform(0.002, 0.004)
        y = 0.04 + 8 * x
        errs.append(abs(f.predict(x) - y) / y)
        f.update(x, y)
    # The x range is narrow, so the intercept takes most of it; the error at the samples
    # still falls from 95% to the size of the spread the intercept cannot explain.
    assert errs[0] > 0.9
    assert max(errs[3:]) < 0.3
    assert sum(errs[8:]) / len(errs[8:]) < 0.1


def test_slope_bounds_and_never_negative() -> None:
    o = CalibrationOptions(min_slope=0.5, max_slope=2.0)
    f = AffineFit(o)
    for _ in range(100):
        f.update(1.0, 1.0)
        f.update(2.0, 0.5)  # the data want a negative slope
    assert f.b == 0.5
    g = AffineFit(o)
    for _ in range(100):
        g.update(0.0, 0.0001)
        g.update(1.0, 50.0)  # the data want a slope of 50
    assert g.b == 2.0
    h = AffineFit()
    for _ in range(50):
        h.update(10.0, 1.0)  # far over-predicted: large negative intercept or small slope
    assert h.predict(0.0) >= 0.0 and h.predict(0.001) >= 0.0


def test_ignores_samples_it_cannot_use() -> None:
    f = AffineFit()
    for x, y in ((-1.0, 1.0), (1.0, -1.0), (math.nan, 1.0), (1.0, math.inf), (0.0, 0.0)):
        assert not f.update(x, y)
    assert f.samples == 0 and (f.a, f.b) == (0.0, 1.0)


def test_covariance_does_not_wind_up_without_excitation() -> None:
    # Thousands of samples at one x (slope unidentifiable) then a new x: the step stays
    # bounded by the prior (no covariance blow-up from the forgetting factor).
    f = AffineFit()
    for _ in range(5000):
        f.update(0.01, 0.03)
    assert f._p is not None
    assert f._p[0] <= f._p0[0] * (1 + 1e-9) and f._p[2] <= f._p0[1] * (1 + 1e-9)
    before = f.predict(1.0)
    f.update(1.0, 3 * before)
    assert f.predict(1.0) < 3 * before


def test_offset_only_fit_learns_the_mean() -> None:
    f = AffineFit(slope=False)
    for y in [0.010, 0.012, 0.011, 0.009] * 50:
        f.update(0.0, y)
    assert f.b == 1.0
    assert f.predict(0.0) == pytest.approx(0.0105, rel=0.02)


def test_options_are_validated() -> None:
    for bad in (
        {"memory": 1.0},
        {"clip": 0.0},
        {"prior": -1.0},
        {"min_slope": 0.0},
        {"max_slope": 0.5},
    ):
        with pytest.raises(ValueError):
            CalibrationOptions(**bad)  # type: ignore[arg-type]


def test_the_measured_parts_teach_their_own_fits() -> None:
    cal = Calibration(CalibrationOptions(apply_transfer=True))
    assert cal.get("p0") is None  # nothing measured: predict uncalibrated
    for _ in range(200):
        # model compute 10 ms -> measured 30 ms; fetch 1 ms -> 5 ms; 7 ms outside.
        t = PrefillTimings(queue_s=0.02, transfer_s=0.005, compute_s=0.03)
        cal.observe("p0", 0.062, 0.010, 0.001, True, t, predicted_ttft_s=0.0)
    p0 = cal.get("p0")
    assert p0 is not None
    assert p0.compute_s(0.010) == pytest.approx(0.03, rel=1e-3)
    assert p0.transfer_s(0.001) == pytest.approx(0.005, rel=1e-3)
    assert p0.overhead_s() == pytest.approx(0.007, rel=1e-3)
    # An instance never measured starts from what the cluster measured.
    p9 = cal.get("p9")
    assert p9 is not None and p9.compute_s(0.010) == pytest.approx(0.03, rel=1e-3)


def test_transfer_is_applied_only_when_asked() -> None:
    cal = Calibration()
    for _ in range(100):
        cal.observe("p0", 0.1, 0.01, 0.001, True, PrefillTimings(0.0, 0.005, 0.01), 0.0)
    p0 = cal.get("p0")
    assert p0 is not None and cal.snapshot().transfer.samples == 100
    assert p0.shared.transfer.predict(0.001) == pytest.approx(0.005, rel=1e-2)
    assert p0.transfer_s(0.001) == 0.001


def test_transfer_is_never_predicted_below_the_network_model() -> None:
    cal = Calibration(CalibrationOptions(apply_transfer=True))
    for _ in range(100):
        cal.observe("p0", 0.1, 0.01, 0.05, True, PrefillTimings(0.0, 0.001, 0.01), 0.0)
    p0 = cal.get("p0")
    assert p0 is not None
    assert p0.shared.transfer.predict(0.05) < 0.01  # the fit learned "much cheaper"...
    assert p0.transfer_s(0.05) == 0.05  # ...but the prediction stays at the model


def test_transfer_learns_only_from_fetching_requests() -> None:
    cal = Calibration()
    cal.observe("p0", 0.1, 0.01, 0.0, False, PrefillTimings(0.0, 0.0, 0.01), 0.0)
    cal.observe("p0", 0.1, 0.01, 0.02, True, PrefillTimings(0.0, 0.0, 0.01), 0.0)  # none moved
    snap = cal.snapshot()
    assert snap.transfer.samples == 0 and snap.compute.samples == 2


def test_end_to_end_only_credits_the_overhead() -> None:
    cal = Calibration()
    for _ in range(300):
        p0 = cal.get("p0")
        over = p0.overhead_s() if p0 is not None else 0.0
        cal.observe("p0", 0.05, 0.01, 0.0, False, None, predicted_ttft_s=0.01 + over)
    p0 = cal.get("p0")
    assert p0 is not None and cal.snapshot().compute.samples == 0
    assert p0.overhead_s() == pytest.approx(0.04, rel=1e-3)


def test_shrunk_factor_by_hand() -> None:
    assert shrunk_factor(0.3, 0.05) == pytest.approx(math.exp(0.3 * (1 - (0.1 / 0.3) ** 2)))
    assert shrunk_factor(-0.3, 0.05) == pytest.approx(math.exp(-0.3 * (1 - (0.1 / 0.3) ** 2)))
    assert shrunk_factor(0.09, 0.05) == 1.0  # within two standard errors: not acted on
    assert shrunk_factor(0.5, math.inf) == 1.0


def test_a_slower_instance_gets_its_own_factor() -> None:
    cal = Calibration()
    rng = random.Random(4)
    for _ in range(300):
        for name, speed in (("fast", 1.0), ("slow", 2.0)):
            x = rng.uniform(0.01, 0.1)
            y = speed * x * rng.uniform(0.95, 1.05)
            cal.observe(name, y, x, 0.0, False, PrefillTimings(0.0, 0.0, y), 0.0)
    fast, slow = cal.get("fast"), cal.get("slow")
    assert fast is not None and slow is not None
    assert fast.compute_s(0.05) == pytest.approx(0.05, rel=0.05)
    assert slow.compute_s(0.05) == pytest.approx(0.10, rel=0.05)


def test_noise_alone_gives_no_instance_factors() -> None:
    # Four identical instances with 30% noise: differences between them are noise and
    # the policies must not act on them.
    cal = Calibration()
    rng = random.Random(6)
    names = ["p0", "p1", "p2", "p3"]
    for _ in range(200):
        for name in names:
            x = rng.uniform(0.01, 0.1)
            y = x * math.exp(rng.gauss(0.0, 0.3))
            cal.observe(name, y, x, 0.0, False, PrefillTimings(0.0, 0.0, y), 0.0)
    factors = [s.compute.factor for s in cal.snapshot().instances]
    assert [s.instance for s in cal.snapshot().instances] == names
    assert all(f == pytest.approx(1.0, abs=0.03) for f in factors), factors


def test_shape_curve_by_octave() -> None:
    s = ShapeCurve()
    assert s.factor(0.3) == 1.0
    s.update(0.3, 0.3, 0.6)
    assert s.factor(0.3) == 1.0  # one sample: no standard error yet
    for _ in range(20):
        s.update(0.3, 0.3, 0.6)
        s.update(0.4, 0.4, 0.8)
    assert s.factor(0.26) == pytest.approx(2.0, rel=1e-3)  # [0.25, 0.5) octave
    # Octaves never measured take the nearest measured one's factor.
    assert s.factor(0.5) == s.factor(0.2) == s.factor(30.0) == s.factor(0.26)
    for _ in range(20):
        s.update(4.0, 4.0, 2.0)  # [4, 8): half the fit
    assert s.factor(5.0) == pytest.approx(0.5, rel=1e-3)
    assert s.factor(2.1) == pytest.approx(0.5, rel=1e-3)  # [2, 4) is nearer to [4, 8)
    assert s.factor(1.0) == pytest.approx(2.0, rel=1e-3)  # [1, 2): a tie goes down
    assert s.snapshot() == ((0.25, s.factor(0.3), 41), (4.0, s.factor(5.0), 20))


def test_shape_curve_fixes_an_overextrapolated_profile() -> None:
    # The profile's quadratic term is 2.5x too large, which only shows past its range:
    # the affine fit cannot bend, the octave factors do.
    cal = Calibration()
    rng = random.Random(8)

    def model(n: int) -> float:
        return 0.2e-3 * n + 3.0e-7 * n * n

    def truth(n: int) -> float:
        return 0.2e-3 * n + 1.2e-7 * n * n

    errs, affine = [], []
    for i in range(600):
        n = rng.choice((30, 60, 120, 250, 500, 900, 1500, 2500, 3800))
        p0 = cal.get("p0")
        y = truth(n)
        if i >= 500 and p0 is not None:
            errs.append(abs(p0.compute_s(model(n)) - y) / y)
            affine.append(abs(p0.shared.compute.predict(model(n)) - y) / y)
        cal.observe("p0", y, model(n), 0.0, False, PrefillTimings(0.0, 0.0, y), 0.0)
    # Within an octave the ratio still varies (an octave spans 2x of the model's time).
    assert max(errs) < 0.06 and sum(errs) / len(errs) < 0.03
    assert max(affine) > 0.3


def test_shape_curve_trusts_one_sample_far_outside_the_pooled_noise() -> None:
    # Long prompts are rare: one measured far off in a new octave is used when the other
    # octaves show the noise is small, and the next octave up borrows it.
    s = ShapeCurve()
    rng = random.Random(9)
    for _ in range(30):
        for x in (0.1, 0.3, 0.6):
            s.update(x, x, x * rng.uniform(0.95, 1.05))
    s.update(9.0, 9.0, 6.3)  # [8, 16): 0.7 of the fit, once
    assert s.factor(9.0) == pytest.approx(0.7, rel=0.02)
    assert s.factor(40.0) == s.factor(9.0)  # [32, 64) never measured: nearest octave
    noisy = ShapeCurve()
    for _ in range(30):
        for x in (0.1, 0.3, 0.6):
            noisy.update(x, x, x * math.exp(rng.gauss(0.0, 0.5)))
    noisy.update(9.0, 9.0, 6.3)  # the same sample among 50% noise: not acted on
    assert noisy.factor(9.0) == 1.0
