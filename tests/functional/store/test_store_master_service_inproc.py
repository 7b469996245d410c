"""MasterService in this process: concurrency rules of the shell around the core."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.errors import StoreError
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


async def test_keep_alive_retries_a_refused_remount_until_it_lands() -> None:
    # The client comes back while another client holds its segment's name: the first
    # remount is refused. The beat that carried the news re-registered the client, so
    # the master never says "forgotten" again; the keep-alive itself must retry the
    # remount, or the segment stays gone for good once the name is free.
    cfg = MasterConfig(client_ttl_s=1.0, unmount_grace_s=0.2)
    svc = MasterService(cfg, ServiceOptions(port=0, metrics_port=None, tick_interval_s=0.05))
    await svc.start()
    attempts: list[str] = []
    addr = f"127.0.0.1:{svc.port}"
    try:
        async with (
            MasterClient(addr, client_id="node") as c,
            MasterClient(addr, client_id="squatter") as other,
        ):
            await c.mount_segment("node/dram", 4096)

            async def remount() -> bool:
                try:
                    await c.mount_segment("node/dram", 4096)
                except StoreError as exc:
                    attempts.append(type(exc).__name__)
                    return False
                attempts.append("ok")
                return True

            await asyncio.sleep(1.4)  # silent past client_ttl_s: expired, segment gone
            assert (await c.get_snapshot()).segments == ()
            await other.mount_segment("node/dram", 1024)
            beating = asyncio.create_task(c.keep_alive(0.1, remount))
            try:
                for _ in range(40):
                    await asyncio.sleep(0.05)
                    if len(attempts) >= 3:
                        break
                await other.unmount_segment("node/dram")  # the name is free after grace
                for _ in range(100):
                    await asyncio.sleep(0.05)
                    if "ok" in attempts:
                        break
                await asyncio.sleep(0.5)  # once it landed, no more remounts
            finally:
                beating.cancel()
            assert attempts[:3] == ["ConflictError"] * 3, attempts
            assert attempts[-1] == "ok" and attempts.count("ok") == 1, attempts
            snap = await c.get_snapshot()
            assert [(s.name, s.client_id) for s in snap.segments] == [("node/dram", "node")]
    finally:
        await svc.stop()
