"""`move_off` against a real in-process master: which objects are copied, which only lose
their replica, what a failed copy leaves behind, and that a re-run finishes the job.

The copier here moves no bytes (there is no segment memory in this test): it records
what it was asked to copy, or fails; byte movement is covered by test_cluster_drain.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterable

import pytest

from mooncake_core.cluster.drain import MoveStopped, move_off, undrain_node
from mooncake_core.cluster.replica_copy import CopyError
from mooncake_core.config.models import MasterConfig
from mooncake_core.store import Replica, ReplicateConfig, SegmentSnapshot, SegmentState
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.master_service import MasterService, ServiceOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class RecordingCopier:
    """Records every copy asked for; the first ``fail_first`` of them fail."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[tuple[int, Replica, Replica]] = []
        self.fail_first = fail_first

    def set_segments(self, segments: Iterable[SegmentSnapshot]) -> None:
        self.segments = [s.name for s in segments]

    def copy(self, size: int, source: Replica, target: Replica) -> None:
        self.calls.append((size, source, target))
        if len(self.calls) <= self.fail_first:
            raise CopyError("writing the new replica failed: test")


@contextlib.asynccontextmanager
async def _master() -> AsyncIterator[MasterClient]:
    """A real in-process master with segments n0 and n1/dram, and a client of it."""
    svc = MasterService(
        MasterConfig(lease_ttl_s=0.5),
        ServiceOptions(port=0, metrics_port=None, tick_interval_s=0.05),
    )
    await svc.start()
    try:
        async with MasterClient(f"127.0.0.1:{svc.port}", client_id="t") as c:
            for name in ("n0", "n1/dram"):
                await c.mount_segment(name, 1 << 16)
            yield c
    finally:
        await svc.stop()


async def test_move_off_copies_sole_objects_and_recovers_from_a_failed_copy() -> None:
    async with _master() as c:
        on_n0 = ReplicateConfig(preferred_segments=("n0",))
        for i in range(3):
            await c.put_start(f"sole{i}", 128, on_n0)
            await c.put_end(f"sole{i}")
        await c.put_start("both", 128, ReplicateConfig(replica_num=2))
        await c.put_end("both")
        await c.drain_segment("n0")

        seen: list[tuple[int, int]] = []
        bad = RecordingCopier(fail_first=1)
        report = await move_off(c, "n0", bad, lambda d, t: seen.append((d, t)))
        assert report.segments == ("n0",)
        assert (report.copied, report.copied_bytes, report.dropped) == (2, 256, 3)
        assert [k for k, _ in report.failed] == ["sole0"]
        assert "CopyError" in report.failed[0][1]
        assert seen[-1] == (3, 4)
        assert bad.segments == ["n0", "n1/dram"]
        # Every copy read from n0 and wrote to n1/dram.
        assert all({s.segment for s in src} == {"n0"} for _, src, _ in bad.calls)
        assert all({s.segment for s in dst} == {"n1/dram"} for _, _, dst in bad.calls)
        # The failed copy's replica was revoked: sole0 is still only on n0.
        info = await c.stat("sole0")
        assert [{s.segment for s in r} for r in info.replicas] == [{"n0"}]
        assert (await c.stat("both")).replicas[0][0].segment == "n1/dram"

        good = RecordingCopier()
        again = await move_off(c, "n0", good)
        assert (again.copied, again.dropped, again.failed) == (1, 1, ())
        for _ in range(100):  # the drain's own leases end after lease_ttl_s
            snap = await c.get_snapshot()
            n0 = next(s for s in snap.segments if s.name == "n0")
            if n0.state == SegmentState.DRAINED:
                break
            await asyncio.sleep(0.05)
        assert (n0.state, n0.used, n0.keys) == (SegmentState.DRAINED, 0, 0)
        assert await undrain_node(c, "n0") == ["n0"]
        with pytest.raises(ValueError, match="nodes: n0, n1"):
            await move_off(c, "n9", good)


async def test_a_set_stop_ends_the_move_before_any_copy() -> None:
    async with _master() as c:
        await c.put_start("sole", 128, ReplicateConfig(preferred_segments=("n0",)))
        await c.put_end("sole")
        await c.drain_segment("n0")
        stop = threading.Event()
        stop.set()
        copier = RecordingCopier()
        with pytest.raises(MoveStopped) as stopped:
            await move_off(c, "n0", copier, stop=stop)
        # No copy started, and the addition started for it was revoked: a new one
        # can start (a pending one would be refused "already being added").
        assert copier.calls == [] and stopped.value.done == 0
        info = await c.stat("sole")
        assert [{s.segment for s in r} for r in info.replicas] == [{"n0"}]
        await c.add_replica_start("sole")
        await c.add_replica_revoke("sole")
