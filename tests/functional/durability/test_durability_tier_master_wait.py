"""The master service's wait for SSD stages, in this process over real gRPC: concurrent
readers of one SSD-only object share one stage; a node that never answers costs the
readers stage_timeout_s, then UNAVAILABLE (the SSD copy is kept), never a hang; a batch
read waits only for its SSD-only keys."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import events as ev
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.errors import NotFoundError, UnavailableError
from mooncake_core.store.master_service import MasterService, ServiceOptions
from mooncake_core.store.results import GetResult, ReplicateConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SEG = "n/dram"


async def _setup(stage_timeout_s: float) -> tuple[MasterService, MasterClient, MasterClient]:
    cfg = MasterConfig(
        stage_timeout_s=stage_timeout_s, client_ttl_s=60, lease_ttl_s=5, offload_watermark=0.2
    )
    svc = MasterService(cfg, ServiceOptions(port=0, metrics_port=None, tick_interval_s=0.05))
    await svc.start()
    addr = f"127.0.0.1:{svc.port}"
    node, reader = MasterClient(addr, client_id="n"), MasterClient(addr, client_id="r")
    await node.mount_segment(SEG, 4096, ssd_capacity=1 << 20)
    subscribed = asyncio.Event()
    stream = node.watch_events(subscribed)
    first = asyncio.ensure_future(anext(stream))
    await asyncio.wait_for(subscribed.wait(), 5)
    await reader.put_start("cold", 1000, ReplicateConfig())
    await reader.put_end("cold")  # 25% of the segment: above the offload watermark
    w = await asyncio.wait_for(first, 5)
    while not isinstance(w.event, ev.OffloadRequested):
        w = await asyncio.wait_for(anext(stream), 5)
    # (Bytes are not the point here: the node just confirms.)
    await node.tier_offload_done("cold", SEG, w.event.token, True)
    await stream.aclose()
    for key in ("warm", "w2", "w3", "w4"):  # the fourth needs room: "cold" goes to SSD
        await reader.put_start(key, 1000, ReplicateConfig())
        await reader.put_end(key)
    assert (await reader.stat("cold")).replicas == ()
    await reader.remove("w4")
    return svc, node, reader


async def test_concurrent_readers_share_one_stage() -> None:
    svc, node, reader = await _setup(stage_timeout_s=5.0)
    requests: list[ev.StageRequested] = []
    subscribed = asyncio.Event()

    async def answer() -> None:
        async for w in node.watch_events(subscribed):
            if isinstance(w.event, ev.StageRequested):
                requests.append(w.event)
                await asyncio.sleep(0.3)  # reading the file
                await node.tier_stage_done(w.event.key, SEG, w.event.request_id, True)

    task = asyncio.create_task(answer())
    try:
        await asyncio.wait_for(subscribed.wait(), 5)
        reads = [asyncio.create_task(reader.get_replica_list("cold")) for _ in range(5)]
        batch = asyncio.create_task(reader.batch_get_replica_list(["warm", "cold", "missing"]))
        got = [await t for t in reads]
        many = await batch
        assert len(requests) == 1  # one stage for six readers
        replica = requests[0].replica
        assert all(g.replicas == (replica,) for g in got)
        assert isinstance(many[0], GetResult) and isinstance(many[1], GetResult)
        assert many[1].replicas == (replica,)
        assert isinstance(many[2], NotFoundError)
        assert (await reader.get_snapshot()).ssd_stages_total == 1
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await node.close()
        await reader.close()
        await svc.stop()


async def test_a_stage_nobody_answers_is_unavailable_and_keeps_the_copy() -> None:
    svc, node, reader = await _setup(stage_timeout_s=0.5)
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(UnavailableError, match="did not answer"):
            await reader.get_replica_list("cold")
        assert loop.time() - t0 < 5.0  # answered after the stage timeout, no hang
        snap = await reader.get_snapshot()
        assert (snap.ssd_stage_failures_total, snap.ssd_lost_objects_total) == (1, 0)
        # The staging range is held for the node (it may still be reading a slow disk
        # into it) until put_release_s after the stage started: the DRAM objects left
        # (eviction at the high watermark may have taken one while the stage held its
        # range) and that one range use space.
        assert snap.allocated_bytes == 1024 * (snap.key_count - 1) + 1024
        info = await reader.stat("cold")  # kept: the node may only have been away
        assert (info.replicas, info.ssd_segments) == ((), (SEG,))
    finally:
        await node.close()
        await reader.close()
        await svc.stop()
