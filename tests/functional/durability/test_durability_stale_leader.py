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
from pathlib import Path

import grpc
import pytest
from durability_proc_support import ETCD, Proc, ha_pair, role, start_etcd, until

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc
from mooncake_core.store.client.async_master import MasterClient

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)"),
]

LEASE_S = 2


async def test_resumed_leader_refuses_reads_after_losing_its_lease(tmp_path: Path) -> None:
    etcd, url = start_etcd(tmp_path)
    masters: list[Proc] = []
    stopped: Proc | None = None
    try:
        old, other = await ha_pair(
            tmp_path, [url.replace("http://", "etcd://")] * 2, LEASE_S, masters
        )

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
                await until("the other master leads", lambda: role(other) == "leader")
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
