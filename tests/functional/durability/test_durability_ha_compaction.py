"""HA pieces in-process against a real etcd: log compaction into an etcd snapshot, a
fresh follower catching up from snapshot + log, handover on a clean leader stop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from durability_proc_support import ETCD, start_etcd

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.ha.election import HaController, HaOptions
from mooncake_core.store.ha.etcd import EtcdClient, prefix_end
from mooncake_core.store.ha.replication import HaKeys
from mooncake_core.store.master_service import MasterService, ServiceOptions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)"),
]


async def _master(url: str, name: str) -> tuple[MasterService, HaController]:
    svc = MasterService(
        MasterConfig(client_ttl_s=30.0),
        ServiceOptions(port=0, metrics_port=None),
        role="recovering",
    )
    await svc.start()
    ctl = HaController(
        svc,
        HaOptions(endpoint=url, member_id=name, lease_ttl_s=2, snapshot_every=40),
        f"127.0.0.1:{svc.port}",
        "",
    )
    await ctl.start()
    return svc, ctl


async def _until(cond, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_compaction_fresh_follower_and_handover(tmp_path: Path) -> None:
    etcd_proc, url = start_etcd(tmp_path)
    etcd = EtcdClient(url)
    started: list[tuple[MasterService, HaController]] = []
    try:
        a = await _master(url, "a")
        started.append(a)
        await _until(lambda: a[0].role == "leader")
        async with MasterClient(f"127.0.0.1:{a[0].port}", client_id="w") as mc:
            await mc.mount_segment("w/dram", 64 << 20)
            for i in range(150):
                await mc.put_start(f"k{i:03d}", 1000)
                await mc.put_end(f"k{i:03d}")
            await mc.remove("k007")
            await mc.pin("k01", prefix=True, hard=True)
        keys = HaKeys()
        await _until(lambda: a[0].sink is not None and a[0].sink.since_snapshot < 40)
        await asyncio.sleep(0.5)  # let the last compaction finish its deletes
        meta = await etcd.get(keys.snap_meta)
        assert meta is not None
        logs = await etcd.range(keys.log_prefix, prefix_end(keys.log_prefix))
        # Only batches after the last snapshot (plus the one straddling it) are left.
        first = int(logs.kvs[0].key.rsplit(b"/", 1)[1])
        assert first > 100 and len(logs.kvs) <= 41

        b = await _master(url, "b")  # a fresh follower: snapshot + log tail
        started.append(b)
        await _until(lambda: b[0].role == "follower" and b[1].info()["caught_up"])
        leader_seq = a[0].sink.last_seq  # type: ignore[union-attr]
        await _until(lambda: b[1].info()["applied_seq"] == leader_seq)

        await a[1].stop()  # clean stop revokes the lease: b takes over at once
        await a[0].stop()
        started.remove(a)
        t0 = time.monotonic()
        await _until(lambda: b[0].role == "leader", timeout=10)
        print(f"\nclean handover in {time.monotonic() - t0:.2f} s")
        async with MasterClient(f"127.0.0.1:{b[0].port}", client_id="r") as mc:
            listed = [k async for k in mc.iter_keys()]
            assert listed == [f"k{i:03d}" for i in range(150) if i != 7]
            pins = [(p.target, p.is_prefix, p.hard) for p in await mc.list_pins()]
            assert pins == [("k01", True, True)]
            assert [s.name for s in (await mc.get_snapshot()).segments] == ["w/dram"]
    finally:
        for svc, ctl in started:
            await ctl.stop()
            await svc.stop()
        await etcd.close()
        etcd_proc.stop()
