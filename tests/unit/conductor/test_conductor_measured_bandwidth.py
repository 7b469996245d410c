"""Live bandwidth: measured fetches teach the network model, and decisions record it."""

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
from mooncake_core.conductor.audit.explain import explain
from mooncake_core.conductor.audit.records import AuditEntry
from mooncake_core.config.models import ConductorConfig, HashingConfig

MiB = 1 << 20


def test_a_measured_transfer_sets_both_ends_unless_configured() -> None:
    net = NetworkModel(default_bandwidth_bps=1e9, latency_s=0.001)
    net.set_bandwidth("store-0", "eth0", 5e9)
    assert net.bandwidth_source("p0") == "default"
    # 4 MiB in 5 ms, 1 ms of it the fixed latency: 4 MiB / 4 ms.
    assert net.observe_transfer("store-0", "p0", 4 * MiB, 0.005, now=10.0) == 4 * MiB / 0.004
    assert net.bandwidth("p0") == 4 * MiB / 0.004 and net.bandwidth_source("p0") == "measured"
    assert net.bandwidth("store-0") == 5e9 and net.bandwidth_source("store-0") == "configured"
    assert net.measured_samples("p0") == 1 and net.measured_samples("store-0") == 0
    assert [(lk.location, lk.source) for lk in net.snapshot(10.0).links] == [
        ("p0", "measured"),
        ("store-0", "configured"),
    ]


def test_too_small_or_bad_samples_teach_nothing() -> None:
    net = NetworkModel(default_bandwidth_bps=1e9)
    assert net.observe_transfer("a", "b", MiB - 1, 0.001, 0.0) is None  # mostly fixed costs
    assert net.observe_transfer("a", "a", 8 * MiB, 0.001, 0.0) is None  # no NIC on the path
    for bad in (0.0, -1.0, math.nan, math.inf):
        assert net.observe_transfer("a", "b", 8 * MiB, bad, 0.0) is None
    assert net.bandwidth_source("a") == net.bandwidth_source("b") == "default"


def test_the_estimate_is_a_decaying_maximum() -> None:
    net = NetworkModel(default_bandwidth_bps=1e9, measured_half_life_s=10.0)
    net.observe_transfer("s", "p", 8e6, 0.008, now=0.0)  # 1e9 B/s
    net.observe_transfer("s", "p", 8e6, 0.016, now=0.0)  # a shared moment: 5e8
    assert net.bandwidth("p") == pytest.approx(1e9)  # contention is not the NIC's speed
    net.observe_transfer("s", "p", 8e6, 0.016, now=10.0)  # one half-life later
    assert net.bandwidth("p") == pytest.approx(5e8)  # max(5e8, 1e9 / 2)
    net.observe_transfer("s", "p", 8e6, 0.002, now=10.0)  # faster: believed at once
    assert net.bandwidth("p") == pytest.approx(4e9)
    assert net.measured_samples("p") == 4


def test_removing_the_last_configured_nic_falls_back_to_the_measurement() -> None:
    net = NetworkModel(default_bandwidth_bps=1e9)
    net.observe_transfer("s", "p", 8e6, 0.004, now=0.0)  # 2e9
    net.set_bandwidth("p", "eth0", 3e9)
    assert (net.bandwidth("p"), net.bandwidth_source("p")) == (3e9, "configured")
    net.remove_nic("p", "eth0")
    assert (net.bandwidth("p"), net.bandwidth_source("p")) == (2e9, "measured")


def make() -> Conductor:
    return Conductor(
        ConductorConfig(policy="kvcache_centric", admission="none"),
        ["p0", "p1"],
        {"d0": 4},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )


def req(rid: str, keys: tuple[int, ...], tokens: int) -> ScheduleRequest:
    return ScheduleRequest(rid, keys, tokens, 5)


def test_a_measured_fetch_reprices_the_next_migration_and_is_recorded() -> None:
    # Blocks of 10 tokens x 100 bytes: 1 KB each; 2000 blocks = 2 MB fetched.
    keys = tuple(range(1, 2001))
    c = make()  # every location at the 1e6 B/s default
    c.network.min_measured_bytes = 1e6
    c.apply(BlockStored("store-0", Tier.DRAM, keys))
    first = c.schedule(req("a", keys, tokens=20_010), 0.0)
    assert first.migration is not None
    m = first.migration
    assert (m.source, m.bandwidth_bps, m.bandwidth_source) == ("store-0", 1e6, "default")
    c.on_prefill_start("a", 0.0)
    # The fetch took 0.2 s: 2 MB / 0.2 s = 1e7 B/s at both ends.
    c.on_prefill_done("a", 0.5, actual_transfer_s=0.2)
    assert c.network.bandwidth("store-0") == c.network.bandwidth("p0") == pytest.approx(1e7)

    # Another prefix in the store: p0's measured path now beats p1's default one.
    keys2 = tuple(range(5001, 7001))
    c.apply(BlockStored("store-0", Tier.DRAM, keys2))
    second = c.schedule(req("b", keys2, tokens=20_010), 1.0)
    assert second.migration is not None and second.prefill == "p0"
    assert second.migration.bandwidth_bps == pytest.approx(1e7)
    assert second.migration.bandwidth_source == "measured"
    assert second.migration.predicted_s < m.predicted_s / 5

    rec, rows = second.to_record()
    assert rec.migration_bandwidth_bps == pytest.approx(1e7)
    assert rec.migration_bandwidth_source == "measured"
    text = explain(AuditEntry(1, rec, rows))
    assert "priced at 10.0 MB/s (measured on earlier fetches)" in text, text
    assert first.to_record()[0].migration_bandwidth_source == "default"


def _migrated(c: Conductor, keys: tuple[int, ...]) -> None:
    c.apply(BlockStored("store-0", Tier.DRAM, keys))
    d = c.schedule(req("a", keys, tokens=20_010), 0.0)
    assert d.migration is not None and len(d.migration.keys) == len(keys)
    c.on_prefill_start("a", 0.0)


def test_a_fetch_that_moved_nothing_teaches_nothing() -> None:
    # The worker found the blocks already cached (another request fetched them first):
    # 50 us for "2 MB" is no bandwidth; taken as one, it priced later fetches into
    # this instance at the other end's default (a live run saw exactly that).
    c = make()
    c.network.min_measured_bytes = 1e6
    _migrated(c, tuple(range(1, 2001)))
    c.on_prefill_done("a", 0.5, actual_transfer_s=50e-6, fetched_blocks=0)
    assert c.network.bandwidth_source("p0") == "default"
    assert c.network.bandwidth_source("store-0") == "default"


def test_a_partial_fetch_teaches_the_bytes_it_moved() -> None:
    # Half the planned blocks moved (1 MB) in 0.2 s: 5e6 B/s, not the 1e7 the planned
    # 2 MB would read as.
    c = make()
    c.network.min_measured_bytes = 1e6
    _migrated(c, tuple(range(1, 2001)))
    c.on_prefill_done("a", 0.5, actual_transfer_s=0.2, fetched_blocks=1000)
    assert c.network.bandwidth("p0") == pytest.approx(5e6)
    assert c.network.bandwidth("store-0") == pytest.approx(5e6)
