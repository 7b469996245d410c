"""A leader paused past its etcd lease serves no stale read when it resumes.

Two masters under etcd. The leader is SIGSTOPped; the other takes over and a key is
removed there. A read sent to the old leader while it is stopped waits in its socket;
on SIGCONT that read must be refused (NOT_LEADER: lease not confirmed), never answered
with the replica list of the removed object (whose range the new leader may already
have handed to another writer).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from durability_proc_support import ETCD, Proc, health, start_etcd, start_master

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc
from mooncake_core.store.master_client import MasterClient

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)"),
]

LEASE_S = 2


def _role(m: Proc) -> str:
    return str(health(m).get("readiness", {}).get("state", ""))


async def _wait(what: str, cond: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: timed out"
        await asyncio.sleep(0.1)


async def test_resumed_leader_refuses_reads_after_losing_its_lease(tmp_path: Path) -> None:
    etcd, url = start_etcd(tmp_path)
    masters: list[Proc] = []
    stopped: Proc | None = None
    try:
        ha = ["--ha", url.replace("http://", "etcd://"), "--lease-ttl", str(LEASE_S)]
        for name in ("m1", "m2"):
            masters.append(start_master(tmp_path, {"client_ttl_s": 30.0}, [*ha, "--id", name]))
        old = await _wait(
            "a leader", lambda: next((m for m in masters if _role(m) == "leader"), None)
        )
        other = next(m for m in masters if m is not old)
        await _wait("follower caught up", lambda: health(other)["readiness"].get("caught_up"))

        mc = await MasterClient.from_etcd(url, client_id="writer", failover_timeout_s=30.0)
        beat = asyncio.create_task(mc.keep_alive(0.5))
        try:
            await mc.mount_segment("seg", 1 << 20)
            await mc.put_start("k", 4096)
            await mc.put_end("k")
            async with grpc.aio.insecure_channel(old.address) as ch:
                stub = pb_grpc.MasterServiceStub(ch)
                first = await stub.GetReplicaList(pb.GetReplicaListRequest(key="k"))
                assert first.error.code == 0 and len(first.replicas) == 1

                os.kill(old.proc.pid, signal.SIGSTOP)
                stopped = old
                await _wait("the other master leads", lambda: _role(other) == "leader")
                await mc.remove("k")  # through the new leader
                # Sent while the old leader is stopped: it waits in the kernel.
                late = asyncio.ensure_future(
                    stub.GetReplicaList(pb.GetReplicaListRequest(key="k"), timeout=30)
                )
                await asyncio.sleep(0.5)
                os.kill(old.proc.pid, signal.SIGCONT)
                stopped = None
                try:
                    reply = await late
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                    assert "NOT_LEADER" in (exc.details() or ""), exc.details()
                else:
                    raise AssertionError(
                        f"the resumed old leader answered a read: error={reply.error.code} "
                        f"replicas={len(reply.replicas)} (the object was removed by the new leader)"
                    )
        finally:
            beat.cancel()
            await mc.close()
    finally:
        if stopped is not None:
            os.kill(stopped.proc.pid, signal.SIGCONT)
        for m in masters:
            m.stop(signal.SIGKILL)
        etcd.stop()
