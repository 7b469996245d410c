"""A leader partitioned from etcd, while its clients still reach it, stops serving.

Two ``--ha`` masters, each reaching etcd through its own ``CutProxy``; the store
client reaches etcd and both masters directly. The leader's link to etcd is cut (the
process runs on and answers its clients). It must then:

- acknowledge no write (it cannot replicate one to etcd);
- answer no read once its lease may have run out, and none after the other master,
  now leading, removed a key (the classic split brain: a stale replica list whose
  range the new leader may hand to another writer);
- step down by itself (exit 3; a keeper restarts it as a follower).

A write refused at the cut-off leader must not appear later through the new one.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from durability_proc_support import ETCD, Proc, ha_pair, role, start_etcd
from faults import CutProxy

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.errors import NotFoundError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)"),
]

LEASE_S = 2
EXIT_DEPOSED = 3


async def _read(stub: Any, key: str) -> str:
    """``ok`` (a replica list served), ``refused: ...`` or ``unreachable: ...``."""
    try:
        r = await stub.GetReplicaList(pb.GetReplicaListRequest(key=key), timeout=1.0)
    except grpc.aio.AioRpcError as exc:
        detail = exc.details() or ""
        kind = "refused" if "NOT_LEADER" in detail else "unreachable"
        return f"{kind}: {exc.code().name} {detail[:80]}"
    if r.error.code == 0 and len(r.replicas) > 0:
        return "ok"
    return f"refused: error {r.error.code} {r.error.message[:80]}"


async def _put(stub: Any, key: str) -> str:
    """PutStart + PutEnd of a 4096-byte object: ``acknowledged`` or why not."""
    try:
        start = await stub.PutStart(
            pb.PutStartRequest(
                client_id="writer", key=key, size=4096, config=pb.ReplicateConfig(replica_num=1)
            ),
            timeout=15.0,
        )
        if start.error.code:
            return f"PutStart error {start.error.code}: {start.error.message[:80]}"
        end = await stub.PutEnd(pb.KeyRequest(client_id="writer", key=key), timeout=15.0)
    except grpc.aio.AioRpcError as exc:
        return f"refused: {exc.code().name} {(exc.details() or '')[:80]}"
    if end.error.code:
        return f"PutEnd error {end.error.code}: {end.error.message[:80]}"
    return "acknowledged"


async def test_leader_cut_off_from_etcd_acknowledges_nothing_and_serves_no_stale_read(
    tmp_path: Path,
) -> None:
    etcd, url = start_etcd(tmp_path)
    proxies = [CutProxy(int(url.rsplit(":", 1)[1])) for _ in range(2)]
    masters: list[Proc] = []
    try:
        urls = [f"etcd://127.0.0.1:{p.port}" for p in proxies]
        old, other = await ha_pair(tmp_path, urls, LEASE_S, masters)

        mc = await MasterClient.from_etcd(url, client_id="writer", failover_timeout_s=30.0)
        beat = asyncio.create_task(mc.keep_alive(0.5))
        try:
            await mc.mount_segment("seg", 1 << 20)
            await mc.put_start("k", 4096)
            await mc.put_end("k")
            async with grpc.aio.insecure_channel(old.address) as ch:
                stub = pb_grpc.MasterServiceStub(ch)
                assert await _read(stub, "k") == "ok"

                proxies[masters.index(old)].cut()
                cut_at = time.monotonic()
                # A write at the cut-off leader cannot reach etcd: never acknowledged.
                # (PutStart itself is no acknowledgement: its reply does not wait for
                # etcd; the PutEnd that makes the object visible does.)
                put_k2 = await _put(stub, "k2")
                assert put_k2 != "acknowledged", "the cut-off leader acknowledged a write"

                # Poll the old leader until the other one leads; note the last read served.
                last_ok = cut_at
                while role(other) != "leader":
                    assert time.monotonic() - cut_at < 30, "no new leader within 30 s"
                    if await _read(stub, "k") == "ok":
                        last_ok = time.monotonic()
                    await asyncio.sleep(0.05)
                # Its lease was last confirmed before the cut; a reply received more than
                # the lease (plus a second of scheduling) after it was served past it.
                assert last_ok - cut_at < LEASE_S + 1.0, (
                    f"the cut-off leader served a read {last_ok - cut_at:.2f} s after the cut"
                )

                await mc.remove("k")  # through the new leader (the client follows etcd)
                after = await _read(stub, "k")
                assert not after.startswith("ok"), "stale read from the cut-off leader"
                rc = await asyncio.to_thread(old.proc.wait, 30)
                assert rc == EXIT_DEPOSED, f"the cut-off leader exited {rc}, not deposed (3)"
            proxies[masters.index(old)].heal()

            with pytest.raises(NotFoundError):
                await mc.get_replica_list("k")
            with pytest.raises(NotFoundError):
                await mc.get_replica_list("k2")  # not acknowledged: never written
        finally:
            beat.cancel()
            await mc.close()
    finally:
        for m in masters:
            m.stop()
        for proxy in proxies:
            proxy.close()
        etcd.stop()
