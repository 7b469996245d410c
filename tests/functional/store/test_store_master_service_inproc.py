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
