"""The replica-move RPCs over real gRPC (in-process master), their WatchEvents events,
and the master's /health fields (version, hashing)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from store_proc_support import MasterProc

from mooncake_core import __version__
from mooncake_core.config.models import MasterConfig
from mooncake_core.store import (
    ConflictError,
    ErrorCode,
    NotFoundError,
    ReplicaAdded,
    ReplicaDropped,
    ReplicateConfig,
    SegmentState,
    Slice,
)
from mooncake_core.store.client.async_master import MasterClient, WatchedEvent
from mooncake_core.store.master_service import MasterService, ServiceOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_move_a_replica_over_grpc() -> None:
    opts = ServiceOptions(port=0, metrics_port=0, hashing={"block_size": 16, "seed": 7})
    svc = MasterService(MasterConfig(lease_ttl_s=60.0), opts)
    await svc.start()
    try:
        async with MasterClient(f"127.0.0.1:{svc.port}", client_id="node") as c:
            for name in ("a", "b"):
                await c.mount_segment(name, 4096)
            await c.put_start("k", 128, ReplicateConfig(preferred_segments=("a",)))
            await c.put_end("k")
            seen: list[WatchedEvent] = []
            ready = asyncio.Event()

            async def watch() -> None:
                async for e in c.watch_events(ready):
                    seen.append(e)

            watcher = asyncio.create_task(watch())
            await asyncio.wait_for(ready.wait(), 10)

            await c.drain_segment("a")
            page = await c.list_segment_objects("a")
            assert [e.key for e in page.entries] == ["k"] and page.next_start_after is None
            with pytest.raises(ConflictError) as refused:
                await c.add_replica_start("k", target_segment="a")
            assert refused.value.code == ErrorCode.INVALID_STATE
            rep = await c.add_replica_start("k", exclude_segments=["zz"])
            assert rep == (Slice("b", 0, 128),)
            assert (await c.get_replica_list("k")).replicas == ((Slice("a", 0, 128),),)
            await c.add_replica_end("k")
            assert await c.drop_replica("k", "a") is False  # our get above holds a lease
            assert (await c.get_replica_list("k")).replicas == (rep,)
            with pytest.raises(NotFoundError):
                await c.add_replica_end("k")
            await c.undrain_segment("a")
            snap = await c.get_snapshot()
            assert {s.name: s.state for s in snap.segments}["a"] == SegmentState.MOUNTED

            for _ in range(100):
                if any(isinstance(e.event, ReplicaDropped) for e in seen):
                    break
                await asyncio.sleep(0.05)
            watcher.cancel()
            events = [e.event for e in seen]
            added = [e for e in events if isinstance(e, ReplicaAdded)]
            assert [(e.key, e.replica, e.replicas) for e in added] == [("k", rep, 2)]
            dropped = [e for e in events if isinstance(e, ReplicaDropped)]
            assert [(e.key, e.segment, e.replicas_left) for e in dropped] == [("k", "a", 1)]

        url = f"http://127.0.0.1:{svc.metrics_port}/health"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        health = json.loads(body)
        assert health["version"] == f"mooncake-py {__version__}"
        assert health["hashing"] == {"block_size": 16, "seed": 7}
    finally:
        await svc.stop()


async def test_moves_survive_a_master_crash(
    start_master: Callable[..., MasterProc], tmp_path: Path
) -> None:
    """SIGKILL after an added replica, a drop and an undrain: the restarted master (from
    its journal) has exactly that layout, and a pending addition is gone (its range
    held for the copier, which may still be writing it, until put_release_s)."""
    flags = ["--data-dir", str(tmp_path / "journal")]
    m = start_master(flags)
    async with MasterClient(m.address, client_id="node") as c:
        for name in ("a", "b", "c"):
            await c.mount_segment(name, 4096)
        for key in ("k", "j"):
            await c.put_start(key, 128, ReplicateConfig(preferred_segments=("a",)))
            await c.put_end(key)
        await c.drain_segment("a")
        rep = await c.add_replica_start("k", target_segment="b")
        await c.add_replica_end("k")
        await c.drop_replica("k", "a")
        await c.add_replica_start("j", target_segment="c")  # never ended
        await c.undrain_segment("a")
    m.proc.kill()
    m.proc.wait(10)
    m2 = start_master(flags)
    async with MasterClient(m2.address, client_id="node") as c:
        assert (await c.stat("k")).replicas == (rep,)
        assert (await c.stat("j")).replicas == ((Slice("a", 128, 128),),)
        snap = await c.get_snapshot()
        assert {s.name: (s.state, s.used) for s in snap.segments} == {
            "a": (SegmentState.MOUNTED, 128),
            "b": (SegmentState.MOUNTED, 128),
            "c": (SegmentState.MOUNTED, 128),  # held for j's copier, no key
        }
        assert snap.key_count == 2
        with pytest.raises(NotFoundError):
            await c.add_replica_end("j")
