"""NIC choice follows the topology: preferred NICs first, secondary when they are paused."""

from __future__ import annotations

import time

import pytest

from mooncake_core.topology import Topology

pytestmark = pytest.mark.integration

MiB = 1 << 20
NICS = ("127.0.0.1", "127.0.0.2")


def _topology() -> Topology:
    return Topology.from_matrix(
        {"cpu:0": [["eth0"], ["eth1"]], "cpu:1": [["eth1"], ["eth0"]]},
        {"eth0": ["127.0.0.1"], "eth1": ["127.0.0.2"]},
    )


def test_preferred_then_secondary(make_engine):
    target = make_engine(nics=NICS, topology=_topology())
    seg_mem = target.register_memory(bytearray(8 * MiB), name="s", location="cpu:1")
    seg_mem.view()[:] = bytes(range(256)) * (8 * MiB // 256)
    eng = make_engine(nics=NICS, topology=_topology(), config={"nic_failure_threshold": 1})
    seg = eng.open_segment(f"{target.segment_name}/s")
    # The target ranks its NICs for the segment's location (cpu:1 -> eth1 first).
    assert seg.info.nics == (f"127.0.0.2:{target.segment_name.rsplit(':', 1)[1]}",)
    assert len(seg.info.secondary_nics) == 1

    local = eng.register_memory(bytearray(8 * MiB), location="cpu:0")
    eng.read(local, 0, seg, 0, 8 * MiB)
    snap = eng.snapshot()
    assert snap.nic("127.0.0.1").bytes_received == 8 * MiB  # cpu:0 prefers eth0
    assert snap.nic("127.0.0.2").bytes_received == 0
    assert bytes(local.view()) == bytes(seg_mem.view())

    # Pause the preferred NIC (as repeated failures would): traffic moves to eth1.
    eng._tcp.local_health.record_failure("127.0.0.1", time.monotonic())
    assert eng.snapshot().nic("127.0.0.1").paused
    eng.read(local, 0, seg, 0, 8 * MiB)
    snap = eng.snapshot()
    assert snap.nic("127.0.0.1").bytes_received == 8 * MiB
    assert snap.nic("127.0.0.2").bytes_received == 8 * MiB
