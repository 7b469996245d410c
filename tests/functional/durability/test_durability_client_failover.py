"""The store Client and `mooncake store node` under HA: both find the leader through etcd
(``etcd://...``) and follow it when it is SIGKILLed; every acknowledged put reads back
byte-identical from the nodes, and the nodes stay mounted on the new leader."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml
from durability_proc_support import (
    ETCD,
    Proc,
    health,
    remove_shm_of,
    start_etcd,
    start_master,
    start_node,
)

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions
from mooncake_core.store.errors import StoreError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)"),
]

MASTER = {"client_ttl_s": 5.0, "heartbeat_interval_s": 0.5, "unmount_grace_s": 0.5}


def _leader(masters: list[Proc]) -> Proc | None:
    for m in masters:
        if m.proc.poll() is None and health(m).get("readiness", {}).get("state") == "leader":
            return m
    return None


def _wait(cond, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_store_client_and_nodes_follow_the_leader(tmp_path: Path) -> None:
    etcd, url = start_etcd(tmp_path)
    master_url = url.replace("http://", "etcd://")
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": MASTER}))
    masters: list[Proc] = []
    nodes: list[Proc] = []
    try:
        ha = ["--ha", master_url, "--lease-ttl", "3"]
        for name in ("m1", "m2", "m3"):
            masters.append(start_master(tmp_path, MASTER, [*ha, "--id", name]))
        first = _wait(lambda: _leader(masters))
        nodes = [start_node(cfg, master_url, n) for n in ("n0", "n1")]
        opts = ClientOptions(
            master=master_url,
            master_config=MasterConfig(**MASTER),  # type: ignore[arg-type]
            rpc_timeout_s=20.0,
        )
        with Client(opts).setup() as c:
            assert c._m.address == first.address
            acked: dict[str, bytes] = {}
            failed = 0
            stop = threading.Event()

            def writer() -> None:
                nonlocal failed
                i = 0
                while not stop.is_set():
                    key = f"obj/{i:05d}"
                    i += 1
                    data = os.urandom(1000 + (i * 4099) % 60000)
                    try:
                        c.put(key, data, ReplicateConfig(replica_num=2))
                    except StoreError:
                        failed += 1  # not acknowledged: nothing is promised for it
                        continue
                    acked[key] = data

            t = threading.Thread(target=writer)
            t.start()
            _wait(lambda: len(acked) >= 30)
            before = len(acked)
            first.stop(signal.SIGKILL)
            new = _wait(lambda: _leader(masters))
            _wait(lambda: len(acked) >= before + 30)
            stop.set()
            t.join(30)
            assert not t.is_alive()
            assert c._m.address == new.address and c._m.leader_changes >= 1
            print(f"\n{len(acked)} puts acknowledged ({before} before the kill), {failed} failed")
            for key, data in acked.items():
                assert c.get(key) == data, key
            # Longer than client_ttl_s: the nodes heartbeat (or re-mount on) the new leader.
            time.sleep(6)
            snap = c._m.get_snapshot()
            for n in nodes:  # each node's keep-alive moved to the new leader
                assert f"following the leader to {new.address}" in n.text(), n.text()[-2000:]
            states = {s.name.split("/")[0]: s.state.name for s in snap.segments}
            assert states == {"n0": "MOUNTED", "n1": "MOUNTED"}, states
            for key, data in acked.items():
                assert c.get(key) == data, key
    finally:
        for n in nodes:
            n.stop()
            remove_shm_of(n.proc.pid)
        for m in masters:
            m.stop(signal.SIGKILL)
        etcd.stop()
