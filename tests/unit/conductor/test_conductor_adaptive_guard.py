"""Adaptive's guarded choice: it leaves kvcache_centric's choice only when it wins under both models.

Cluster arithmetic as in test_conductor_policies: blocks of 10 tokens, 1 ms per new
token (10 ms per uncached block), 1000-byte blocks, 1 MB/s everywhere (1 ms per block).
p0 holds blocks (1, 2); the store holds (1, 2, 3): ratio 1.5, which the configured
threshold 1.5 does not pass, so kvcache_centric computes block 3 locally (10 ms), and a
fetch would cost 1 ms transfer plus whatever waits on the store's NIC.
"""

from __future__ import annotations

import math

import pytest

from mooncake_core.conductor import (
    BlockStored,
    Conductor,
    ConductorOptions,
    NetworkModel,
    PrefillTimeModel,
    ScheduleRequest,
    Tier,
)
from mooncake_core.conductor.policies import AdaptivePolicy, CorrectionSupport
from mooncake_core.config.models import ConductorConfig, HashingConfig


def make(policy: str) -> Conductor:
    c = Conductor(
        ConductorConfig(policy=policy, kvcache_balancing_threshold=1.5, admission="none"),  # type: ignore[arg-type]
        ["p0"],
        {"d0": 8},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )
    c.apply(BlockStored("p0", Tier.HBM, (1, 2)))
    c.apply(BlockStored("store-0", Tier.DRAM, (1, 2, 3)))
    return c


REQ = ScheduleRequest("r", (1, 2, 3), 30, 10)


def adaptive(threshold: float, rho_x: float, error: float, backlog_bytes: int = 0) -> Conductor:
    c = make("adaptive")
    pol = c.policy
    assert isinstance(pol, AdaptivePolicy)
    pol.threshold, pol.rho_transfer, pol.error = threshold, rho_x, error
    pol.transfer_support.engaged = True  # a correction supported by its samples (rule 4)
    if backlog_bytes:
        c.network.add_transfer("store-0", "elsewhere", backlog_bytes, 0.0)
    return c


def test_no_learning_means_kvcache_centric_decisions() -> None:
    ref = make("kvcache_centric").schedule(REQ, 0.0)
    d = make("adaptive").schedule(REQ, 0.0)
    assert (d.prefill, d.migration) == (ref.prefill, ref.migration) == ("p0", None)


def test_learned_choice_taken_when_both_models_agree() -> None:
    # Learned threshold 1.0 lets ratio 1.5 fetch; raw: 1 ms + 0 < 10 ms; corrected
    # 1 ms * (1 + 0.5) < 10 ms: adaptive fetches.
    c = adaptive(threshold=1.0, rho_x=1.0, error=0.5)
    d = c.schedule(REQ, 0.0)
    assert d.migration is not None and d.predicted_transfer_s == pytest.approx(0.001)
    assert c.policy.deviations == 1  # type: ignore[attr-defined]


def test_collapsed_transfer_correction_is_vetoed() -> None:
    # 50 kB queued on the store's NIC: a raw fetch costs 51 ms against 10 ms local. The
    # learned transfer ratio collapsed to 0.01 says 0.51 ms: the raw model disagrees,
    # so adaptive keeps kvcache_centric's local plan.
    c = adaptive(threshold=1.0, rho_x=0.01, error=0.0, backlog_bytes=50_000)
    d = c.schedule(REQ, 0.0)
    assert d.migration is None and d.predicted_prefill_s == pytest.approx(0.010)
    assert (c.policy.deviations, c.policy.vetoes) == (0, 1)  # type: ignore[attr-defined]


def test_win_smaller_than_the_learned_error_is_vetoed() -> None:
    # Raw and corrected both say fetch (1 ms vs 10 ms), but the learned model has been
    # off by 10x recently: 1 ms * 11 > 10 ms, not a confident win.
    c = adaptive(threshold=1.0, rho_x=1.0, error=10.0)
    assert c.schedule(REQ, 0.0).migration is None
    assert c.policy.vetoes == 1  # type: ignore[attr-defined]


def test_error_is_learned_from_feedback() -> None:
    c = adaptive(threshold=1.0, rho_x=1.0, error=0.0)
    c.schedule(REQ, 0.0)  # fetch: predicted 1 ms + 0 ms compute
    c.on_prefill_start("r", 0.0)
    c.on_prefill_done("r", 0.003)  # took 3 ms: |3/1 - 1| = 2
    assert c.policy.error == pytest.approx(0.1 * 2.0)  # type: ignore[attr-defined]


def test_move_away_from_the_network_needs_only_a_confident_learned_model() -> None:
    # p0 holds (1,) only: ratio 3 passes 1.5, so kvcache_centric fetches 2 blocks (2 ms
    # raw) instead of computing them (20 ms). Adaptive has learned transfers take 50x
    # their prediction (100 ms) and a threshold of 4: 20 ms * (1 + 0.5) < 100 ms, so it
    # stays local although the raw model disagrees; staying local loads no NIC.
    ref = make("kvcache_centric")
    ref.index.resync("p0", Tier.HBM, [1])
    assert ref.schedule(REQ, 0.0).migration is not None
    c = adaptive(threshold=4.0, rho_x=50.0, error=0.5)
    c.index.resync("p0", Tier.HBM, [1])
    d = c.schedule(REQ, 0.0)
    assert d.migration is None and d.predicted_prefill_s == pytest.approx(0.020)
    assert c.policy.deviations == 1  # type: ignore[attr-defined]
    # The same move with the learned model off by 5x recently (20 ms * 6 > 100 ms): vetoed.
    c = adaptive(threshold=4.0, rho_x=50.0, error=5.0)
    c.index.resync("p0", Tier.HBM, [1])
    assert c.schedule(REQ, 0.0).migration is not None


def test_support_engages_on_consistent_samples_only() -> None:
    # Every transfer took 3x its prediction: log 3 with no spread is supported at once
    # (two samples are the fewest that have a variance).
    s = CorrectionSupport()
    s.add(3.0, 0.1, 2.0, 1.0)
    assert not s.engaged and s.z(0.1) == 0.0
    s.add(3.0, 0.1, 2.0, 1.0)
    assert s.engaged and s.mean == pytest.approx(math.log(3.0))
    # Ratios alternating 0.5 and 2 (log +-0.69) average out near 0: never supported.
    n = CorrectionSupport()
    for i in range(40):
        n.add(2.0 if i % 2 else 0.5, 0.1, 2.0, 1.0)
        assert not n.engaged


def test_support_has_hysteresis() -> None:
    # Engaged at z > 2; stays while z > 1; released at z <= 1. mean/var set by hand:
    # 19 effective samples (weight 0.1), so se = sqrt(var / 19).
    s = CorrectionSupport(mean=0.0, var=19.0, samples=100, engaged=False)  # se = 1
    s.mean = 1.5
    assert s.z(0.1) == pytest.approx(1.5)
    # Between the two thresholds: the state does not change, whichever it is.
    s.add(math.exp(1.5), 0.1, 2.0, 1.0)  # the sample equals the mean: mean stays 1.5
    assert not s.engaged and s.z(0.1) == pytest.approx(1.5 / math.sqrt(0.9))
    s.engaged = True
    s.add(math.exp(1.5), 0.1, 2.0, 1.0)
    assert s.engaged  # z = 1.5/0.9 = 1.67: above release, kept
    s.mean, s.var = 0.5, 19.0
    s.add(math.exp(0.5), 0.1, 2.0, 1.0)  # z = 0.5/sqrt(0.9) = 0.53 <= 1: released
    assert not s.engaged


def test_unsupported_correction_is_not_applied() -> None:
    # Transfer samples alternate 0.2x and 5x their prediction: rho_x (arithmetic mean of
    # the ratios) drifts to ~2.6, but the log-ratios average 0, so no correction is
    # applied and adaptive decides as kvcache_centric.
    c = make("adaptive")
    pol = c.policy
    assert isinstance(pol, AdaptivePolicy)
    for i in range(30):
        pol._blend(1.0, 5.0 if i % 2 else 0.2, pol.transfer_support)
        pol.rho_transfer = 2.6
    assert not pol.transfer_support.engaged
    assert (pol.transfer_scale, pol.prefill_scale) == (1.0, 1.0)
    d, ref = c.schedule(REQ, 0.0), make("kvcache_centric").schedule(REQ, 0.0)
    assert (d.prefill, d.migration, d.predicted_ttft_s) == (
        ref.prefill,
        ref.migration,
        ref.predicted_ttft_s,
    )
