"""A master killed with SIGKILL and restarted alone keeps every acknowledged object."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from durability_proc_support import free_port, health, start_master

from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.errors import StoreError

pytestmark = [pytest.mark.integration]

SEG = 64 << 20


async def _wait_for(cond, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not await cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _all_keys(mc: MasterClient) -> list[str]:
    return [k async for k in mc.iter_keys()]


@pytest.mark.parametrize("fsync", ["always", "batch", "none"])
async def test_sigkill_and_restart_keeps_acknowledged_objects(tmp_path: Path, fsync: str) -> None:
    port = free_port()
    data = tmp_path / "journal"
    flags = ["--data-dir", str(data), "--fsync", fsync]
    m = start_master(tmp_path, {"client_ttl_s": 5.0}, flags, port=port)
    mounts = 0

    async with MasterClient(m.address, client_id="node-a") as mc:

        async def remount() -> None:
            nonlocal mounts
            mounts += 1
            await mc.mount_segment("node-a/dram", SEG, transport_address="127.0.0.1:1")

        await remount()
        beat = asyncio.create_task(mc.keep_alive(0.2, on_forgotten=remount))
        acked: dict[str, object] = {}
        for i in range(150):
            key = f"obj/{i:04d}"
            cfg = ReplicateConfig(hard_pin=(i % 50 == 0))
            await mc.put_start(key, 4096 + i, cfg)
            await mc.put_end(key)
            acked[key] = (await mc.stat(key)).replicas
        in_flight = await mc.put_start("obj/in-flight", 100)  # started, not ended
        # An upsert in progress: the old version's ranges are already free in memory,
        # so a restart must not bring the old version back at them.
        replacing = await mc.upsert("obj/0003", 9000)
        del acked["obj/0003"]
        await mc.remove("obj/0007")
        del acked["obj/0007"]
        await mc.pin("obj/00", prefix=True, ttl_s=600)

        m.stop(signal.SIGKILL)
        m2 = start_master(tmp_path, {"client_ttl_s": 5.0}, flags, port=port)
        try:
            assert "restored 148 objects, 1 segments" in m2.text()
            # The client's next heartbeat reaches the new process on the same address.
            await _wait_for(lambda: _known(mc))
            keys = await _all_keys(mc)
            assert keys == sorted([*acked, "obj/in-flight", "obj/0003"])
            # The writes in progress came back as PROCESSING: their writers can finish.
            assert not await mc.exist("obj/in-flight")
            assert not await mc.exist("obj/0003")
            upserted = await mc.stat("obj/0003")
            assert (upserted.size, upserted.replicas) == (9000, replacing)
            await mc.put_end("obj/in-flight")
            assert (await mc.get_replica_list("obj/in-flight")).replicas == in_flight
            acked["obj/in-flight"] = in_flight
            for key, replicas in acked.items():
                assert (await mc.get_replica_list(key)).replicas == replicas
            pins = {(p.target, p.is_prefix, p.hard) for p in await mc.list_pins()}
            assert pins == {
                ("obj/0000", False, True),
                ("obj/0050", False, True),
                ("obj/0100", False, True),
                ("obj/00", True, False),
            }
            snap = await mc.get_snapshot()
            assert [s.name for s in snap.segments] == ["node-a/dram"]
            assert mounts == 1  # the master remembered the client: no remount needed
            assert health(m2)["readiness"]["durable"] is True
            ready = await mc.get_readiness()
            assert (ready.state, ready.serving, ready.durable, ready.ha) == (
                "standalone",
                True,
                True,
                False,
            )
            assert ready.journal_seq > 0
            # New writes do not land on restored ranges, and survive a second restart.
            await mc.put_start("after", 1 << 20)
            await mc.put_end("after")
            taken = {(s.segment, s.offset) for r in acked.values() for s in r[0]}  # type: ignore[attr-defined]
            after = (await mc.stat("after")).replicas[0][0]
            assert (after.segment, after.offset) not in taken
        finally:
            m2.stop(signal.SIGKILL)
        m3 = start_master(tmp_path, {"client_ttl_s": 5.0}, flags, port=port)
        try:
            await _wait_for(lambda: _known(mc))
            # the second master dropped the unfinished upsert at its put_timeout_s or
            # kept it PROCESSING: either way never the old version
            keys = await _all_keys(mc)
            assert set(keys) - {"obj/0003"} == {*acked, "after"}
        finally:
            beat.cancel()
            assert m3.stop() == 0


async def _known(mc: MasterClient) -> bool:
    try:
        return await mc.heartbeat()
    except StoreError:
        return False


async def test_without_journal_clients_remount_by_themselves(tmp_path: Path) -> None:
    port = free_port()
    m = start_master(tmp_path, {}, [], port=port)
    assert "no journal" in m.text()
    remounted = asyncio.Event()

    async with MasterClient(m.address, client_id="node-b") as mc:

        async def remount() -> None:
            await mc.mount_segment("node-b/dram", SEG)
            remounted.set()

        await mc.mount_segment("node-b/dram", SEG)
        beat = asyncio.create_task(mc.keep_alive(0.2, on_forgotten=remount))
        m.stop(signal.SIGKILL)
        m2 = start_master(tmp_path, {}, [], port=port)
        try:
            await asyncio.wait_for(remounted.wait(), 15)
            snap = await mc.get_snapshot()
            assert [(s.name, s.client_id) for s in snap.segments] == [("node-b/dram", "node-b")]
        finally:
            beat.cancel()
            assert m2.stop() == 0


async def test_range_held_for_a_reader_stays_held_across_a_restart(tmp_path: Path) -> None:
    # A segment with room for two objects; "a" is read (leased), then force-removed: its
    # range is held for that reader. The master is killed and restarted inside the lease;
    # the new master must not give the range to "c" while the old reader may read on.
    port = free_port()
    flags = ["--data-dir", str(tmp_path / "journal")]
    opts = {"client_ttl_s": 5.0, "lease_ttl_s": 6.0}
    size = 1 << 20
    m = start_master(tmp_path, opts, flags, port=port)
    async with MasterClient(m.address, client_id="node-a") as mc:
        await mc.mount_segment("node-a/dram", 2 * size, transport_address="127.0.0.1:1")
        beat = asyncio.create_task(mc.keep_alive(0.2))
        try:
            for key in ("a", "b"):
                await mc.put_start(key, size)
                await mc.put_end(key)
            held = (await mc.get_replica_list("a")).replicas  # leased for 6 s
            await mc.remove("a", force=True)
            m.stop(signal.SIGKILL)
            m2 = start_master(tmp_path, opts, flags, port=port)
            try:
                await _wait_for(lambda: _known(mc))
                with pytest.raises(StoreError) as refused:
                    await mc.put_start("c", size)
                assert refused.value.code.name == "STORE_FULL", refused
                assert await _all_keys(mc) == ["b"]
                # once the lease of the restored master ran out, the range is free again
                await asyncio.sleep(opts["lease_ttl_s"] + 0.5)
                c = await mc.put_start("c", size)
                assert c == held
            finally:
                m2.stop(signal.SIGKILL)
        finally:
            beat.cancel()


@contextlib.asynccontextmanager
async def _two_segments(
    tmp_path: Path, opts: dict[str, float], size: int
) -> AsyncIterator[tuple[MasterClient, Callable[[], Awaitable[None]]]]:
    """A master with a journal and segments node-a/dram, node-b/dram of ``size`` bytes
    (mounted by the heartbeating client node-a, yielded), and a call that SIGKILLs the
    master, starts it again on its journal and returns once it knows the client."""
    port = free_port()
    flags = ["--data-dir", str(tmp_path / "journal")]
    masters = [start_master(tmp_path, opts, flags, port=port)]
    try:
        async with MasterClient(masters[0].address, client_id="node-a") as mc:

            async def restart() -> None:
                masters[-1].stop(signal.SIGKILL)
                masters.append(start_master(tmp_path, opts, flags, port=port))
                await _wait_for(lambda: _known(mc))

            for name in ("node-a/dram", "node-b/dram"):
                await mc.mount_segment(name, size, transport_address="127.0.0.1:1")
            beat = asyncio.create_task(mc.keep_alive(0.2))
            try:
                yield mc, restart
            finally:
                beat.cancel()
    finally:
        masters[-1].stop(signal.SIGKILL)


async def _put_refused_for_lack_of_space(mc: MasterClient, size: int) -> None:
    with pytest.raises(StoreError) as refused:
        await mc.put_start("c", size)
    assert refused.value.code.name == "STORE_FULL", refused


async def test_range_of_a_replica_being_added_stays_held_across_a_restart(
    tmp_path: Path,
) -> None:
    # "a" lives on node-a; a replica of it is being added on node-b (the copier has its
    # range, nothing in the object records says so). The master is killed and restarted:
    # the new one must not give node-b's range to "c" while the copier may still write
    # it (put_release_s), or the copier's late bytes would land in "c".
    opts = {"client_ttl_s": 5.0, "lease_ttl_s": 30.0}  # "a" is not evicted meanwhile
    size = 1 << 20
    async with _two_segments(tmp_path, opts, size) as (mc, restart):
        await mc.put_start("a", size, ReplicateConfig(preferred_segments=("node-a/dram",)))
        await mc.put_end("a")
        await mc.add_replica_start("a", target_segment="node-b/dram")
        await restart()
        await _put_refused_for_lack_of_space(mc, size)
        assert await _all_keys(mc) == ["a"]


async def test_range_of_a_grant_stays_held_across_a_restart(tmp_path: Path) -> None:
    # A writer was granted node-b's range for its next put (docs/store.md, "Grants")
    # and may be writing it when the master is killed. The restarted master does not
    # know the grant (the writer's commit is refused STALE, so it puts again the usual
    # way) and must not give that range to "c" while the writer may still write it.
    opts = {"client_ttl_s": 5.0, "lease_ttl_s": 30.0, "eviction_high_watermark": 1.0}
    size = 1 << 20
    async with _two_segments(tmp_path, opts, size) as (mc, restart):
        await mc.put_start("a", size, ReplicateConfig(preferred_segments=("node-a/dram",)))
        got = await mc.put_commit("a", 0, size, next_size=size)
        assert got is not None, "no grant"
        gid, ((sl,),) = got
        assert sl.segment == "node-b/dram"
        await restart()
        await _put_refused_for_lack_of_space(mc, size)
        with pytest.raises(StoreError) as stale:
            await mc.put_commit("c", gid, size)
        assert stale.value.code.name == "STALE", stale
        assert await _all_keys(mc) == ["a"]


async def test_a_batch_committed_through_grants_and_the_next_batch_s_ranges_survive_a_restart(
    tmp_path: Path,
) -> None:
    # A batch is committed through its grants (acknowledged: durable) while the grants
    # of the next batch are out, their writer maybe writing them, when the master is
    # killed. The restarted master has every committed key where it was, refuses the
    # outstanding grants STALE and places nothing in their ranges meanwhile.
    opts = {"client_ttl_s": 5.0, "lease_ttl_s": 30.0, "eviction_high_watermark": 1.0}
    size, part = 1 << 20, 1 << 18
    on_b = ReplicateConfig(preferred_segments=("node-b/dram",))
    async with _two_segments(tmp_path, opts, size) as (mc, restart):
        first = [f"a{i}" for i in range(4)]
        on_a = ReplicateConfig(preferred_segments=("node-a/dram",))
        assert all(
            not isinstance(r, StoreError)
            for r in await mc.batch_put_start([(k, part) for k in first], on_a)
        )
        errors, g1 = await mc.batch_put_commit(first, (), part, next_count=2, config=on_b)
        assert errors == [None] * 4 and len(g1) == 2, (errors, g1)
        errors, g2 = await mc.batch_put_commit(
            ["b0", "b1"], [g for g, _ in g1], part, next_count=2, config=on_b
        )
        assert errors == [None, None] and len(g2) == 2, (errors, g2)
        acked = {k: (await mc.stat(k)).replicas for k in [*first, "b0", "b1"]}
        assert {acked[k][0][0].segment for k in ("b0", "b1")} == {"node-b/dram"}
        await restart()
        assert {k: (await mc.stat(k)).replicas for k in acked} == acked
        errors, _ = await mc.batch_put_commit(["c0", "c1"], [g for g, _ in g2], part)
        assert [e.code.name if e else None for e in errors] == ["STALE", "STALE"]
        with pytest.raises(StoreError) as refused:
            await mc.put_start("c", part)
        assert refused.value.code.name == "STORE_FULL", refused
        assert sorted(await _all_keys(mc)) == sorted(acked)
