"""Undrain while the dashboard's drain moves objects, at many points of its work, against
a real in-process master: the drain stops between objects, so it never leaves an
object with a replica addition pending (a second replica that would sit on the other
node until ``put_timeout_s`` discards it) nor drops a replica it has not replaced.

The copier moves no bytes (there is no segment memory here): it records what it was
asked to copy; byte movement is covered by tests/functional/cluster/test_cluster_drain.py
and the dashboard's own drain tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import ClassVar

import pytest

from mooncake_core.cluster.drain import undrain_node
from mooncake_core.config.models import MasterConfig
from mooncake_core.store import (
    Replica,
    ReplicateConfig,
    SegmentSnapshot,
)
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.master_service import MasterService, ServiceOptions
from mooncake_web.drains import DrainJobs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEYS = [f"k{i:03d}" for i in range(300)]


class _SlowCopier:
    """Records copies; each takes a little time, as a real transfer does."""

    copies: ClassVar[list[str]] = []

    def set_segments(self, segments: Iterable[SegmentSnapshot]) -> None:
        pass

    def copy(self, size: int, source: Replica, target: Replica) -> None:
        time.sleep(0.002)
        _SlowCopier.copies.append(target[0].segment)

    def close(self) -> None:
        pass


async def _on_n1(c: MasterClient) -> tuple[int, int]:
    """(keys the master counts on n1, objects listed there). A pending addition to n1
    is counted (its space is taken) but not listed (no reader sees it)."""
    counted = next(s.keys for s in (await c.get_snapshot()).segments if s.name == "n1/dram")
    listed = await c.list_segment_objects("n1/dram", limit=1000)
    return counted, len(listed.entries)


async def test_undrain_at_any_point_leaves_no_addition_pending() -> None:
    svc = MasterService(
        # The test client sends no heartbeats: a long client TTL keeps its segments
        # mounted however slow this machine is.
        MasterConfig(lease_ttl_s=0.2, put_timeout_s=300.0, client_ttl_s=600.0),
        ServiceOptions(port=0, metrics_port=None, tick_interval_s=0.05),
    )
    await svc.start()
    try:
        async with MasterClient(f"127.0.0.1:{svc.port}", client_id="t") as c:
            for name in ("n0", "n1/dram"):
                await c.mount_segment(name, 64 << 20)  # room: nothing is evicted
            on_n0 = ReplicateConfig(preferred_segments=("n0",))
            for key in KEYS:
                await c.put_start(key, 128, on_n0)
                await c.put_end(key)
            jobs = DrainJobs(_SlowCopier, wait_s=5.0, poll_s=0.05)
            moved_before = 0
            for trial in range(24):
                await jobs.start(c, "n0", time.time())
                # Undrain at a different point of the drain's work each time: while it
                # builds its copier, lists, reads a replica list, starts an addition,
                # copies, ends it or drops the old replica.
                await asyncio.sleep(0.002 * (trial % 12) + 0.001 * (trial // 12))
                assert await jobs.cancel("n0") is True, jobs.get("n0")
                job = jobs.get("n0")
                assert job is not None and job.state == "cancelled", job
                assert await undrain_node(c, "n0") == ["n0"]
                counted, listed = await _on_n1(c)
                assert counted == listed, f"trial {trial}: an addition left pending"
                assert listed >= moved_before  # objects already moved stay moved
                moved_before = listed
            for key in KEYS:  # never none, never two for good
                info = await c.stat(key)
                assert len(info.replicas) == 1, (key, info.replicas)
            # The drain did move objects across the trials (the undrains were not all
            # before its first object).
            assert moved_before > 0 and _SlowCopier.copies
            assert (await c.get_snapshot()).evicted_objects_total == 0
    finally:
        await svc.stop()
