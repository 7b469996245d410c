"""SSD tier, master side, over real gRPC: the real `mooncake master` process; this test
plays one store node honestly in-process (its segment memory is a bytearray, its SSD
tier a real SsdTier in a temp dir, it follows WatchEvents and answers the Tier RPCs) and
one writer/reader that puts bytes into that memory and reads them back from the
replicas the master hands out. The end-to-end test with real `mooncake store node`
processes is test_durability_tier_node.py."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from durability_proc_support import Proc, free_port, start_master

from mooncake_core.store import events as ev
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.errors import NotFoundError, StoreError
from mooncake_core.store.objects import Replica
from mooncake_core.store.results import ReplicateConfig
from mooncake_core.store.tier.ssd import SsdRead, SsdTier, SsdTierOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SEG = "node-a/dram"
CAP = 64 << 10
SIZE = 6 << 10
CFG = {
    "offload_watermark": 0.3,
    "lease_ttl_s": 1.0,
    "client_ttl_s": 30.0,
    "stage_timeout_s": 5.0,
    "promote_after": 2,
    "unmount_grace_s": 0.0,
}


class Node:
    """One store node: DRAM segment (bytearray) + SsdTier, driven by the master's events.

    It follows the master across a restart the way a real node does: a broken event
    stream or heartbeat is retried with a new connection to ``address``.
    """

    def __init__(self, address: str, tmp: Path) -> None:
        self.address = address
        self.mem = bytearray(CAP)
        self.tier = SsdTier(SsdTierOptions(tmp / "ssd", 1 << 20))
        self.staged: list[str] = []
        self.subscribed = asyncio.Event()

    def read(self, replica: Replica) -> bytes:
        return b"".join(bytes(self.mem[s.offset : s.offset + s.length]) for s in replica)

    def write(self, replica: Replica, data: bytes) -> None:
        pos = 0
        for s in replica:
            self.mem[s.offset : s.offset + s.length] = data[pos : pos + s.length]
            pos += s.length

    async def run(self) -> None:
        mounted = False
        while True:
            mc = MasterClient(self.address, client_id="node-a", timeout_s=5.0)
            beat = asyncio.create_task(mc.keep_alive(0.5))
            try:
                if not mounted:
                    await mc.mount_segment(SEG, CAP, ssd_capacity=1 << 20)
                    mounted = True
                async for w in mc.watch_events(self.subscribed):
                    await self.handle(mc, w.event)
            except StoreError:
                pass  # master gone: reconnect
            finally:
                self.subscribed.clear()
                beat.cancel()
                with contextlib.suppress(BaseException):
                    await beat
                await mc.close()
            await asyncio.sleep(0.2)

    async def handle(self, mc: MasterClient, e: ev.Event) -> None:
        if isinstance(e, ev.OffloadRequested) and e.segment == SEG:
            ok = await asyncio.to_thread(self.tier.put, e.key, self.read(e.replica))
            with contextlib.suppress(StoreError):  # STALE: the object changed meanwhile
                await mc.tier_offload_done(e.key, e.segment, e.token, ok)
        elif isinstance(e, ev.StageRequested) and e.segment == SEG:
            got = await asyncio.to_thread(self.tier.fetch, e.key)
            self.staged.append(e.key)
            if isinstance(got, SsdRead):
                self.write(e.replica, got.data)
                await mc.tier_stage_done(e.key, e.segment, e.request_id, True)
            else:
                await mc.tier_stage_done(e.key, e.segment, e.request_id, False, got.reason)
        elif isinstance(e, ev.ObjectRemoved):
            self.tier.remove(e.key)


def payload(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(SIZE))


async def wait_for(cond: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_evicted_objects_come_back_from_ssd_and_corruption_is_a_miss(
    tmp_path: Path,
) -> None:
    port = free_port()
    extra = ["--data-dir", str(tmp_path / "journal")]
    master = start_master(tmp_path, CFG, extra, port=port)
    node = Node(master.address, tmp_path)
    task = asyncio.create_task(node.run())
    writer = MasterClient(master.address, client_id="writer")
    try:
        await asyncio.wait_for(node.subscribed.wait(), 10)
        cfg = ReplicateConfig(replica_num=1)

        async def put(i: int) -> None:
            (rep,) = await writer.put_start(f"obj{i:02d}", SIZE, cfg)
            node.write(rep, payload(i))
            await writer.put_end(f"obj{i:02d}")

        for i in range(4):  # 24 KiB of 64: above the 30% offload watermark
            await put(i)

        async def offloaded() -> bool:
            return (await writer.get_snapshot()).ssd_offloads_total >= 4

        await wait_for(offloaded)
        for i in range(4, 16):  # 72 KiB more: DRAM cannot hold it all
            await put(i)
        snap = await writer.get_snapshot()
        assert snap.offloaded_evictions_total >= 1 and snap.ssd_only_count >= 1
        keys = [k.key for k in (await writer.list_keys()).entries]
        ssd_only = []
        for key in keys:
            with contextlib.suppress(NotFoundError):  # evicted since the listing
                if not (await writer.stat(key)).replicas:
                    ssd_only.append(key)
        assert len(ssd_only) >= 2, keys
        for key in ssd_only:
            assert (await writer.stat(key)).ssd_segments == (SEG,), key

        # Every SSD-only object reads back with its exact bytes (staged on demand).
        for key in ssd_only:
            got = await writer.get_replica_list(key)
            assert node.read(got.replicas[0]) == payload(int(key[3:])), key
        assert set(ssd_only) <= set(node.staged)
        assert (await writer.get_snapshot()).ssd_stages_total >= len(ssd_only)
        metrics = await asyncio.to_thread(_get, master.metrics_url + "/metrics")
        stages = re.search(r"^master_ssd_stages_total (\S+)$", metrics, re.M)
        assert stages is not None and float(stages[1]) >= len(ssd_only)

        # A corrupt file: the stage fails, the object is lost, never wrong bytes.
        victim = ssd_only[0]

        async def back_on_ssd_only() -> bool:
            return not (await writer.stat(victim)).replicas

        await wait_for(back_on_ssd_only)  # its stage copy is dropped after the 1 s lease
        path = node.tier.path_of(victim)
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0xFF
        path.write_bytes(bytes(raw))
        with pytest.raises(NotFoundError):
            await writer.get_replica_list(victim)
        assert node.tier.snapshot().corrupt == 1
        assert (await writer.get_snapshot()).ssd_lost_objects_total == 1

        # Kill and restart the master: the SSD copies were journaled.
        survivors = ssd_only[1:]

        async def all_ssd_only() -> bool:
            infos = [await writer.stat(k) for k in survivors]
            return all(not i.replicas for i in infos)

        await wait_for(all_ssd_only)  # every stage copy dropped again
        master.stop(signal.SIGKILL)
        await writer.close()
        master = start_master(tmp_path, CFG, extra, port=port)
        writer = MasterClient(master.address, client_id="writer")
        for key in survivors:
            info = await writer.stat(key)
            assert (info.replicas, info.ssd_segments) == ((), (SEG,)), key
        await asyncio.wait_for(node.subscribed.wait(), 10)  # the node follows
        key = survivors[-1]
        got = await writer.get_replica_list(key)
        assert node.read(got.replicas[0]) == payload(int(key[3:]))
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await writer.close()
        _stop(master)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def _stop(master: Proc) -> None:
    assert master.stop() == 0, master.text()[-3000:]
