"""MasterService in this process: concurrency rules of the shell around the core."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.master_client import MasterClient
from mooncake_core.store.master_service import MasterService, ServiceOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_heartbeats_are_answered_while_a_bulk_call_holds_the_core() -> None:
    svc = MasterService(MasterConfig(), ServiceOptions(port=0, metrics_port=None))
    await svc.start()
    started, release = threading.Event(), threading.Event()

    def slow_bulk(now: float) -> bool:
        started.set()
        return release.wait(20)  # stands in for a regex walk over millions of keys

    try:
        bulk = asyncio.create_task(svc.call_bulk("RemoveAll", slow_bulk))
        assert await asyncio.to_thread(started.wait, 10)
        async with MasterClient(f"127.0.0.1:{svc.port}", client_id="node") as c:
            assert await c.heartbeat() is False  # first contact: unknown, registered
            assert await c.heartbeat() is True
            assert not bulk.done()  # answered while the bulk call still ran
            other = asyncio.create_task(c.exist("k"))  # a core call waits for the lock
            await asyncio.sleep(0.2)
            assert not other.done()
            release.set()
            assert await bulk is True
            assert await other is False
    finally:
        release.set()
        await svc.stop()


async def test_keep_alive_remounts_when_the_master_forgot_the_client() -> None:
    cfg = MasterConfig(client_ttl_s=1.5)
    svc = MasterService(cfg, ServiceOptions(port=0, metrics_port=None, tick_interval_s=0.05))
    await svc.start()
    remounts = 0
    try:
        async with MasterClient(f"127.0.0.1:{svc.port}", client_id="node") as c:
            await c.mount_segment("node/dram", 4096)

            async def remount() -> None:
                nonlocal remounts
                remounts += 1
                await c.mount_segment("node/dram", 4096)

            await asyncio.sleep(2.0)  # silent past client_ttl_s: the segment is dropped
            assert (await c.get_snapshot()).segments == ()
            beating = asyncio.create_task(c.keep_alive(0.1, remount))
            for _ in range(100):
                await asyncio.sleep(0.05)
                if remounts:
                    break
            await asyncio.sleep(2.0)  # keep-alive holds it past another client_ttl_s
            beating.cancel()
            assert remounts == 1
            assert [s.name for s in (await c.get_snapshot()).segments] == ["node/dram"]
    finally:
        await svc.stop()
