"""ViewBuilder: merging polled documents into a ClusterView with explicit time."""

from __future__ import annotations

from typing import Any

import pytest

from mooncake_core.telemetry import (
    AuditDigest,
    DecisionView,
    PollResult,
    Target,
    ViewBuilder,
)

MiB = 1 << 20
TE = Target("node-a", "transfer", "http://127.0.0.1:1")
MASTER = Target("master", "master", "http://127.0.0.1:2")


def _doc(t: float, sent: dict[str, int], os_tx: int = 0, errors: int = 0) -> dict[str, Any]:
    nics = [
        {
            "nic": a,
            "bytes_sent": s,
            "bytes_received": 0,
            "errors": errors,
            "retries": 0,
            "paused": False,
        }
        for a, s in sent.items()
    ]
    return {
        "schema": "mooncake.telemetry/1",
        "component": {
            "name": "node-a",
            "role": "transfer",
            "version": "9",
            "pid": 7,
            "hostname": "h1",
            "uptime_s": t,
        },
        "taken_at": t,
        "snapshots": {"transfer": {"kind": "transfer", "data": {"nics": nics}}},
        "os_nics": [
            {
                "iface": "eth0",
                "tx_bytes": os_tx,
                "rx_bytes": 0,
                "rx_errors": 0,
                "tx_errors": 0,
                "rx_dropped": 0,
                "tx_dropped": 0,
            }
        ],
        "nic_ifaces": {"10.0.0.1": "eth0"},
    }


def _master(evicted: int) -> dict[str, Any]:
    return {
        "key_count": 5,
        "processing_count": 1,
        "allocated_bytes": 3 * MiB,
        "total_capacity_bytes": 8 * MiB,
        "client_count": 2,
        "key_pins": 1,
        "prefix_pins": 2,
        "evicted_objects_total": evicted,
        "segments": [
            {
                "name": "s0",
                "client_id": "store-0",
                "state": "OK",
                "capacity": 4 * MiB,
                "used": MiB,
                "keys": 2,
                "location": "cpu:0",
            },
            {
                "name": "s1",
                "client_id": "store-1",
                "state": "DRAINING",
                "capacity": 4 * MiB,
                "used": 2 * MiB,
                "keys": 3,
                "location": "ssd:/x",
            },
        ],
    }


def test_rates_share_slow_and_os_side_by_side():
    b = ViewBuilder(window_s=10.0, history=3)
    nics0 = {"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0}
    b.update([PollResult(TE, True, telemetry=_doc(100.0, nics0))], now=100.0)
    nics1 = {"10.0.0.1": 10 * MiB, "10.0.0.2": 10 * MiB, "10.0.0.3": MiB}
    v = b.update([PollResult(TE, True, telemetry=_doc(101.0, nics1, os_tx=12 * MiB))], now=101.0)
    by = {n.nic: n for n in v.nics}
    assert by["10.0.0.1"].te_tx_bps == 10 * MiB
    assert by["10.0.0.1"].share == pytest.approx(10 / 21)
    assert by["10.0.0.1"].iface == "eth0"
    assert by["10.0.0.1"].os_tx_bps == 12 * MiB  # the OS sees all traffic on eth0
    assert by["10.0.0.2"].os_tx_bps is None  # no interface known for that address
    assert by["10.0.0.3"].slow and not by["10.0.0.1"].slow
    assert by["10.0.0.1"].history == (0.0, 10 * MiB)
    assert v.host_nics[0].iface == "eth0" and v.host_nics[0].tx_bps == 12 * MiB


def test_idle_peers_are_not_slow():
    b = ViewBuilder()
    b.update([PollResult(TE, True, telemetry=_doc(0.0, {"a": 0, "b": 0}))], now=0.0)
    v = b.update([PollResult(TE, True, telemetry=_doc(1.0, {"a": 100, "b": 0}))], now=1.0)
    assert not any(n.slow for n in v.nics)


def test_down_node_keeps_last_seen_and_loses_nics():
    b = ViewBuilder()
    v = b.update([PollResult(TE, True, telemetry=_doc(5.0, {"a": 0}))], now=5.0)
    assert v.nodes[0].up and v.nodes[0].version == "9" and v.nodes[0].hostname == "h1"
    v = b.update([PollResult(TE, False, error="refused")], now=6.0)
    node = v.nodes[0]
    assert not node.up and node.last_seen == 5.0 and node.error == "refused"
    assert v.nics == () and v.nodes_up == 0


def test_store_from_master_snapshot():
    b = ViewBuilder(window_s=10.0)
    b.update([PollResult(MASTER, True, master=_master(10), health={"uptime_s": 3})], now=0.0)
    v = b.update([PollResult(MASTER, True, master=_master(30))], now=2.0)
    s = v.store
    assert s.available and s.keys == 5 and s.capacity == 8 * MiB and s.used == 3 * MiB
    assert s.evictions_per_s == 10.0
    assert [(g.name, g.tier, g.state) for g in s.segments] == [
        ("s0", "dram", "OK"),
        ("s1", "ssd", "DRAINING"),
    ]
    assert s.tiers == (("dram", 4 * MiB, MiB), ("ssd", 4 * MiB, 2 * MiB))
    assert v.nodes[0].endpoint == "snapshot"


def test_scheduler_from_conductor_and_audit():
    cond = {
        "policy": "kvcache_centric",
        "admission": "early_reject",
        "decisions": 10,
        "admitted": 8,
        "in_flight": 1,
        "rejected": [["b", 1], ["a", 1], ["slo", 5]],
        "ttft_mae_s": 0.2,
        "ttft_bias_s": -0.1,
        "prefill": [{"name": "p0", "queued": 2, "running": 1, "queue_time_s": 0.4}],
        "decode": [{"name": "d0", "batch": 3, "max_batch": 8}],
    }
    c = Target("conductor", "conductor", "http://127.0.0.1:3")

    def doc(t: float, n: int) -> dict[str, Any]:
        return {
            "schema": "mooncake.telemetry/1",
            "component": {"name": "conductor"},
            "taken_at": t,
            "snapshots": {"conductor": {"kind": "conductor", "data": {**cond, "decisions": n}}},
        }

    d = DecisionView(1.0, "r1", "p0", "d0", 0.5, 0.7, True, None, 100)
    audit = AuditDigest((d,), 3, 10.0, (), None)
    b = ViewBuilder(window_s=10.0)
    b.update([PollResult(c, True, telemetry=doc(0.0, 10))], now=0.0, audit=audit)
    v = b.update([PollResult(c, True, telemetry=doc(4.0, 30))], now=4.0, audit=audit)
    s = v.scheduler
    assert s.source == "conductor+audit" and s.decisions_per_s == 5.0
    assert s.rejected == (("slo", 5), ("a", 1), ("b", 1)) and s.rejected_total == 7
    assert [(q.name, q.role, q.queued, q.running, q.capacity) for q in s.queues] == [
        ("p0", "prefill", 2, 1, 0),
        ("d0", "decode", 0, 3, 8),
    ]
    assert s.last_decisions == (d,)


def test_scheduler_from_audit_only():
    d1 = DecisionView(1.0, "r1", "p0", "d0", 0.5, 0.7, True, None, 100)
    d2 = DecisionView(2.0, "r2", None, None, None, None, False, "slo", 100)
    audit = AuditDigest((d2, d1), 20, 10.0, (("slo", 1),), 0.5)
    v = ViewBuilder().update([], now=0.0, audit=audit)
    s = v.scheduler
    assert s.source == "audit" and s.decisions_per_s == 2.0
    assert s.ttft_mae_s == pytest.approx(0.2) and s.ttft_bias_s == pytest.approx(0.2)
    assert v.store.hit_rate == 0.5 and not v.store.available


def test_nothing_answers():
    v = ViewBuilder().update([PollResult(MASTER, False, error="timed out")], now=1.0)
    assert not v.store.available and not v.scheduler.available and v.scheduler.source == "none"
    assert v.nodes[0].last_seen is None


def test_bad_args():
    with pytest.raises(ValueError, match="window_s"):
        ViewBuilder(window_s=0)
    with pytest.raises(ValueError, match="history"):
        ViewBuilder(history=0)
