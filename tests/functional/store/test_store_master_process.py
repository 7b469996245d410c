"""The real `mooncake master` process driven through MasterClient over loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from store_proc_support import MasterProc, http_get

from mooncake_core.store import (
    AuthError,
    ClientExpired,
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    NotFoundError,
    ObjectRemoved,
    ObjectStored,
    RemoveReason,
    ReplicaDropped,
    ReplicateConfig,
    SegmentUnmounted,
    UnmountReason,
)
from mooncake_core.store.client.async_master import MasterClient, WatchedEvent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

StartMaster = Callable[..., MasterProc]


async def collect(mc: MasterClient, out: list[WatchedEvent], ready: asyncio.Event) -> None:
    async for e in mc.watch_events(started=ready):
        out.append(e)


async def test_put_get_remove_over_two_segments(start_master: StartMaster) -> None:
    m = start_master()
    async with (
        MasterClient(m.address, client_id="node-a") as a,
        MasterClient(m.address, client_id="node-b") as b,
    ):
        seg = await a.mount_segment("a/dram", 1 << 20, transport_address="127.0.0.1:17001")
        assert (seg.name, seg.capacity, seg.client_id) == ("a/dram", 1 << 20, "node-a")
        await b.mount_segment("b/dram", 1 << 20, transport_address="127.0.0.1:17002")
        reps = await a.put_start("k1", 4096, ReplicateConfig(replica_num=2))
        assert sorted(r[0].segment for r in reps) == ["a/dram", "b/dram"]
        assert not await b.exist("k1")
        await a.put_end("k1")
        got = await b.get_replica_list("k1")
        assert (got.size, got.replicas, got.lease_ttl_s) == (4096, reps, 10.0)
        assert await b.batch_exist(["k1", "nope"]) == [True, False]
        info = await b.stat("k1")
        assert info.state.name == "COMPLETE" and info.lease_remaining_s > 9.0
        with pytest.raises(ConflictError) as ei:
            await a.put_start("k1", 10)
        assert ei.value.code == ErrorCode.OBJECT_ALREADY_EXISTS
        with pytest.raises(ConflictError) as ei:
            await a.remove("k1")
        assert ei.value.code == ErrorCode.OBJECT_LEASED
        with pytest.raises(InvalidArgumentError, match="invalid regex"):
            await a.remove_by_regex("(")
        res = await a.batch_put_start([("b1", 100), ("", 1), ("b2", 200)])
        assert isinstance(res[1], InvalidArgumentError)
        assert await a.batch_put_end(["b1", "b2"]) == [None, None]
        page = await a.list_keys(limit=2)
        assert [e.key for e in page.entries] == ["b1", "b2"] and page.next_start_after == "b2"
        assert [k async for k in a.iter_keys(page=1)] == ["b1", "b2", "k1"]
        pin = await a.pin("b", prefix=True, hard=True)
        assert (pin.target, pin.is_prefix, pin.hard, pin.expires_at) == ("b", True, True, None)
        assert [p.target for p in await a.list_pins()] == ["b"]
        await a.unpin("b", prefix=True)
        assert (await a.remove_by_prefix("b")).removed == 2
        await a.remove("k1", force=True)
        with pytest.raises(NotFoundError):
            await a.get_replica_list("k1")
        snap = await b.get_snapshot()
        # b read k1 under a 10 s lease: the forced remove holds both 4096-byte replicas'
        # ranges (still allocated) until that lease ends, so no reader sees reused bytes.
        assert (snap.key_count, snap.allocated_bytes, snap.total_capacity_bytes) == (
            0,
            2 * 4096,
            2 << 20,
        )
        assert [s.name for s in snap.segments] == ["a/dram", "b/dram"]


async def test_heartbeat_expiry_and_event_stream(start_master: StartMaster) -> None:
    m = start_master(client_ttl_s=1.0, unmount_grace_s=0.0)
    events: list[WatchedEvent] = []
    async with (
        MasterClient(m.address, client_id="node-a") as a,
        MasterClient(m.address, client_id="node-b") as b,
        MasterClient(m.address, client_id="watcher") as w,
    ):
        ready = asyncio.Event()
        watcher = asyncio.create_task(collect(w, events, ready))
        await asyncio.wait_for(ready.wait(), 10)  # the master registered the stream
        assert w.watch_start_seq == 0
        await a.mount_segment("a/dram", 1 << 20)
        await b.mount_segment("b/dram", 1 << 20)
        await a.put_start("both", 100, ReplicateConfig(replica_num=2))
        await a.put_end("both")
        await a.put_start("only-b", 100, ReplicateConfig(preferred_segments=("b/dram",)))
        await a.put_end("only-b")

        forgotten: list[str] = []

        async def remount() -> None:
            forgotten.append("a")

        beating = asyncio.create_task(a.keep_alive(0.2, remount))
        try:
            for _ in range(60):  # b stops heartbeating: gone after client_ttl_s
                await asyncio.sleep(0.1)
                if not await a.exist("only-b"):
                    break
            assert not await a.exist("only-b")
            got = await a.get_replica_list("both")
            assert [r[0].segment for r in got.replicas] == ["a/dram"]
            assert await b.heartbeat() is False  # b must remount
            removed_many = await a.remove_by_prefix("bo")  # runs in the master's worker thread
            assert (removed_many.removed, removed_many.skipped) == (0, 1)  # leased by our get
            assert (await a.remove_by_prefix("bo", force=True)).removed == 1
        finally:
            beating.cancel()
        assert forgotten == []  # a's heartbeats kept it known throughout
        await asyncio.sleep(0.3)
        watcher.cancel()
    kinds = [e.event for e in events]
    stored = [e.key for e in kinds if isinstance(e, ObjectStored)]
    assert stored == ["both", "only-b"]
    assert next(e for e in kinds if isinstance(e, ReplicaDropped)).key == "both"
    removed = [e for e in kinds if isinstance(e, ObjectRemoved)]
    assert [(e.key, e.reason) for e in removed] == [
        ("only-b", RemoveReason.SEGMENT_LOST),
        ("both", RemoveReason.REMOVED),
    ]
    assert any(
        isinstance(e, SegmentUnmounted) and e.reason == UnmountReason.CLIENT_EXPIRED for e in kinds
    )
    assert any(isinstance(e, ClientExpired) and e.client_id == "node-b" for e in kinds)
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gaps


async def test_metrics_health_and_snapshot_endpoints(start_master: StartMaster) -> None:
    m = start_master()
    async with MasterClient(m.address, client_id="n") as c:
        await c.mount_segment("seg", 4096)
        await c.put_start("x", 100)
        await c.put_end("x")
        with pytest.raises(NotFoundError):
            await c.get_replica_list("missing")
    text = (await asyncio.to_thread(http_get, m.metrics_url + "/metrics")).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("master_key_count", ())] == 1
    assert samples[("master_total_capacity_bytes", ())] == 4096
    assert samples[("master_allocated_bytes", ())] == 128  # 64-byte alignment
    assert samples[("master_rpc_requests_total", (("rpc", "PutStart"),))] == 1
    key = ("master_rpc_failures_total", (("code", "OBJECT_NOT_FOUND"), ("rpc", "GetReplicaList")))
    assert samples[key] == 1
    assert samples[("master_segment_used_bytes", (("segment", "seg"),))] == 128
    health = json.loads(await asyncio.to_thread(http_get, m.metrics_url + "/health"))
    assert (health["status"], health["keys"], health["segments"]) == ("ok", 1, 1)
    snap = json.loads(await asyncio.to_thread(http_get, m.metrics_url + "/snapshot"))
    assert snap["segments"][0]["state"] == "MOUNTED" and snap["key_count"] == 1


async def test_auth_refuses_calls_without_the_token(
    start_master: StartMaster, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret-for-tests\n")
    secret.chmod(0o600)
    m = start_master(extra=["--secret-file", str(secret)])
    async with MasterClient(m.address, client_id="intruder") as bad:
        with pytest.raises(AuthError) as ei:
            await bad.mount_segment("seg", 4096)
        assert ei.value.code == ErrorCode.UNAUTHENTICATED
        with pytest.raises(AuthError):
            async for _ in bad.watch_events():
                pass
    async with MasterClient(m.address, client_id="wrong", secret=b"other") as wrong:
        with pytest.raises(AuthError):
            await wrong.heartbeat()
    async with MasterClient(m.address, client_id="ok", secret=b"s3cret-for-tests") as good:
        await good.mount_segment("seg", 4096)
        assert (await good.get_snapshot()).total_capacity_bytes == 4096
    text = (await asyncio.to_thread(http_get, m.metrics_url + "/metrics")).decode()
    refused = sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "master_auth_failures_total"
    )
    assert refused == 3


def test_bad_secret_file_is_a_clear_error(start_master: StartMaster, tmp_path: Path) -> None:
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "mooncake_cli", "master", "--secret-file", "/nonexistent/s"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 1
    assert "cannot read the cluster secret" in res.stderr


async def test_pages_larger_than_grpc_default_message_size(start_master: StartMaster) -> None:
    m = start_master()
    async with MasterClient(m.address, client_id="n") as c:
        await c.mount_segment("seg", 1 << 30)
        keys = [f"{i:05d}-" + "x" * 4000 for i in range(1200)]  # ~4.8 MB of keys
        res = await c.batch_put_start([(k, 64) for k in keys])
        assert not [r for r in res if not isinstance(r, tuple)]
        assert await c.batch_put_end(keys) == [None] * len(keys)
        page = await c.list_keys(limit=100_000)
        assert [e.key for e in page.entries] == keys and page.next_start_after is None


def test_ports_in_use_are_a_clear_error(start_master: StartMaster) -> None:
    import subprocess
    import sys

    m = start_master()
    grpc_port = m.address.rsplit(":", 1)[1]
    metrics_port = m.metrics_url.rsplit(":", 1)[1]
    for flags, what in [
        (["--port", grpc_port, "--metrics-port", "0"], "cannot bind gRPC"),
        (["--port", "0", "--metrics-port", metrics_port], "cannot bind metrics"),
    ]:
        res = subprocess.run(
            [sys.executable, "-m", "mooncake_cli", "master", *flags],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert res.returncode == 1, res.stderr[-2000:]
        assert what in res.stderr
