"""SSD tier end to end: real master (journal), real store nodes with an SSD tier, real Client.

DRAM (2 x 4 MiB) holds a quarter of the working set (64 x 256 KiB random objects). A
hard-pinned object is written through to disk at once. The master offloads objects to the
nodes' disks ahead of eviction; evicted objects become
SSD-only and are staged back into DRAM when read; a second staging promotes. A byte
flipped in a file is a clean OBJECT_NOT_FOUND (never wrong bytes) and counted by the node;
a master SIGKILLed and restarted from its journal still knows every SSD copy.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

import pytest
import xxhash
import yaml
from durability_proc_support import (
    ETCD,
    Proc,
    free_port,
    health,
    remove_shm_of,
    start_etcd,
    start_master,
)

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions
from mooncake_core.store.errors import CapacityError, NotFoundError, UnavailableError

pytestmark = [pytest.mark.integration]

MASTER: dict[str, Any] = {
    "client_ttl_s": 5.0,
    "heartbeat_interval_s": 0.5,
    "unmount_grace_s": 0.5,
    "lease_ttl_s": 0.5,
    "offload_retry_s": 1.0,
    "stage_timeout_s": 5.0,
    "promote_after": 2,
}
DRAM = 4 << 20
OBJ = 256 << 10
N = 64
READY = re.compile(r"serving segment (\S+) .* at ([\d.]+:\d+) \(health on ([\d.]+:\d+)\)")


def start_tier_node(config: Path, master: str, name: str, ssd_dir: Path) -> Proc:
    """`mooncake store node --ssd-dir --ssd-size` with a 4 MiB segment; waits until ready."""
    cmd = [sys.executable, "-m", "mooncake_cli", "store", "node", "--name", name]
    cmd += ["--size", str(DRAM), "--master", master, "--config", str(config)]
    cmd += ["--metrics-port", "0", "--ssd-dir", str(ssd_dir), "--ssd-size", "64MiB"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert p.stderr is not None
    buf = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        if select.select([p.stderr], [], [], 0.2)[0]:
            buf += os.read(p.stderr.fileno(), 65536)
            m = READY.search(buf.decode(errors="replace").replace("\n", " "))
            if m:
                proc = Proc(p, [buf.decode(errors="replace")])
                proc.metrics_url = f"http://{m[3]}"
                threading.Thread(target=_drain, args=(p.stderr, proc.log), daemon=True).start()
                return proc
    p.kill()
    raise AssertionError(f"node {name} did not start: {buf.decode(errors='replace')[-3000:]}")


def _drain(stream: IO[bytes], log: list[str]) -> None:
    for line in stream:
        log.append(line.decode(errors="replace"))


def node_ssd(node: Proc) -> dict[str, Any]:
    with urllib.request.urlopen(node.metrics_url + "/health", timeout=2) as r:
        ssd: dict[str, Any] = json.loads(r.read())["ssd"]
        return ssd


def file_of(ssd_dir: Path, key: str) -> Path:
    """Where the node's SsdTier keeps ``key`` (docs/durability.md, file layout)."""
    h = f"{xxhash.xxh3_64_intdigest(key.encode()):016x}"
    return ssd_dir / h[:2] / f"{h}.obj"


def wait_offloaded(c: Client, keys: list[str], timeout: float = 20.0) -> None:
    """Wait until no object lies without an SSD copy in a segment at/above the offload
    watermark (the master offloads all of those): then the next put can only evict
    objects that have a copy on disk."""
    wm = MasterConfig(**MASTER).effective_offload_watermark
    deadline = time.monotonic() + timeout
    while True:
        segs = {s.name: s for s in c._m.get_snapshot().segments}
        full = {n for n, s in segs.items() if s.used >= wm * s.capacity}
        lagging = []
        for k in keys:
            info = c.stat(k)
            on = {sl.segment for r in info.replicas for sl in r}
            if on & full and not (on & set(info.ssd_segments)):
                lagging.append(k)
        if not lagging:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"offloads did not keep up: {lagging} lack an SSD copy")
        time.sleep(0.02)


def get_retrying(c: Client, key: str, timeout: float = 15.0) -> bytes:
    """A read that waits out a master restart (UNAVAILABLE), and a DRAM whose every
    object is under a read lease (STORE_FULL: nothing can be evicted to stage into)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.get(key)
        except (UnavailableError, CapacityError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_working_set_four_times_dram_reads_back_through_the_ssd_tier(tmp_path: Path) -> None:
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": MASTER}))
    port = free_port()
    flags = ["--data-dir", str(tmp_path / "journal")]
    master = start_master(tmp_path, MASTER, flags, port=port)
    dirs = {n: tmp_path / f"ssd-{n}" for n in ("n0", "n1")}
    nodes: dict[str, Proc] = {}
    opts = ClientOptions(master=master.address, master_config=MasterConfig(**MASTER))
    try:
        for n, d in dirs.items():
            nodes[n] = start_tier_node(cfg, master.address, n, d)
        written: dict[str, bytes] = {}
        with Client(opts).setup() as c:
            # Write-through for pinned objects: copied to disk at once, with DRAM nearly
            # empty (far below the offload watermark).
            c.pin("pin/", prefix=True, hard=True)
            written["pin/0"] = os.urandom(OBJ)
            c.put("pin/0", written["pin/0"])
            deadline = time.monotonic() + 10
            while not c.stat("pin/0").ssd_segments:
                assert time.monotonic() < deadline, "pinned object not written through"
                time.sleep(0.02)
            for i in range(N):
                key = f"obj/{i:03d}"
                written[key] = os.urandom(OBJ)
                c.put(key, written[key])
                wait_offloaded(c, list(written))
            snap = c._m.get_snapshot()
            assert snap.evicted_objects_total == 0, "an object was evicted without an SSD copy"
            infos = {k: c.stat(k) for k in written}
            ssd_only = [k for k, i in infos.items() if not i.replicas]
            # DRAM holds at most 32 objects: at least half the working set is on disk only.
            assert len(ssd_only) >= N // 2, len(ssd_only)
            assert all(infos[k].ssd_segments for k in ssd_only)

            # The operator sees the SSD copy: `mooncake store stat --json`.
            probe = ssd_only[0]
            cli = [sys.executable, "-m", "mooncake_cli", "store", "stat", probe, "--json"]
            res = subprocess.run(
                [*cli, "--master", master.address, "--config", str(cfg)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert res.returncode == 0, res.stderr
            doc = json.loads(res.stdout)
            assert (doc["replicas"], doc["ssd_segments"]) == ([], list(infos[probe].ssd_segments))

            # Two read passes, the lease (0.5 s) running out in between: every object
            # byte-identical; SSD-only ones are staged, the second staging promotes.
            for _ in range(2):
                for key, data in written.items():
                    assert get_retrying(c, key) == data, key
                time.sleep(1.0)
            stages = sum(node_ssd(p)["stages"] for p in nodes.values())
            assert stages >= len(ssd_only), (stages, len(ssd_only))
            snap = c._m.get_snapshot()
            assert snap.ssd_stages_total == stages and snap.ssd_stage_failures_total == 0
            assert snap.ssd_promotions_total > 0 and snap.offloaded_evictions_total > 0
            assert snap.evicted_objects_total == 0

            # Corrupt the file of one SSD-only object: a clean miss, counted by its node.
            assert c.stat("pin/0").replicas, "a hard-pinned object left DRAM"
            victim = next(k for k in written if not c.stat(k).replicas)
            seg = c.stat(victim).ssd_segments[0]
            path = file_of(dirs[seg], victim)
            blob = bytearray(path.read_bytes())
            blob[-1] ^= 0xFF
            path.write_bytes(bytes(blob))
            with pytest.raises(NotFoundError):
                c.get(victim)
            assert node_ssd(nodes[seg])["corrupt"] == 1
            with urllib.request.urlopen(nodes[seg].metrics_url + "/telemetry", timeout=2) as r:
                assert '"corrupt":1' in r.read().decode()
            with urllib.request.urlopen(nodes[seg].metrics_url + "/metrics", timeout=2) as r:
                metrics = r.read().decode()
            assert re.search(r"ssd_tier\w*corrupt\S* 1(\.0)?$", metrics, re.M), metrics[-3000:]
            assert not c.is_exist(victim) and not path.exists()
            del written[victim]

            # The master SIGKILLed and restarted from its journal knows every SSD copy.
            before = {k: c.stat(k) for k in written}
            subs = {n: node_ssd(p)["resubscribes"] for n, p in nodes.items()}
            master.stop(signal.SIGKILL)
            master = start_master(tmp_path, MASTER, flags, port=port)
            # Each node follows the new master's events (a stage asked of a node that
            # is not listening yet would only time out, after stage_timeout_s).
            deadline = time.monotonic() + 10
            while not all(
                (h := node_ssd(p))["subscribed"] and h["resubscribes"] > subs[n]
                for n, p in nodes.items()
            ):
                assert time.monotonic() < deadline, "a node did not subscribe again"
                time.sleep(0.05)
            listed = {e.key for e in c.list_keys(limit=1000).entries}
            assert listed == set(written)
            for k, info in before.items():
                assert c.stat(k).ssd_segments == info.ssd_segments, k
            assert any(not c.stat(k).replicas for k in written)
            for key, data in written.items():
                assert get_retrying(c, key) == data, key
    finally:
        for p in nodes.values():
            p.stop()
            remove_shm_of(p.proc.pid)
        master.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ssd-dir", "d"], "--ssd-dir d needs --ssd-size"),
        (["--ssd-size", "1GiB"], "needs --ssd-dir"),
    ],
)
def test_node_refuses_half_an_ssd_tier(tmp_path: Path, flags: list[str], message: str) -> None:
    cmd = [sys.executable, "-m", "mooncake_cli", "store", "node", "--name", "n0", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def _leader(masters: list[Proc]) -> Proc | None:
    for m in masters:
        if m.proc.poll() is None and health(m).get("readiness", {}).get("state") == "leader":
            return m
    return None


@pytest.mark.slow
@pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)")
def test_ssd_copies_survive_a_leader_failover(tmp_path: Path) -> None:
    """HA: the nodes follow the leader through etcd for their tier events too; a new
    leader knows every SSD copy and stages SSD-only objects from the same nodes."""
    etcd, url = start_etcd(tmp_path)
    master_url = url.replace("http://", "etcd://")
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": MASTER}))
    masters: list[Proc] = []
    nodes: dict[str, Proc] = {}
    try:
        ha = ["--ha", master_url, "--lease-ttl", "3"]
        masters = [start_master(tmp_path, MASTER, [*ha, "--id", n]) for n in ("m1", "m2", "m3")]
        deadline = time.monotonic() + 30
        while (first := _leader(masters)) is None:
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.05)
        for n in ("n0", "n1"):
            nodes[n] = start_tier_node(cfg, master_url, n, tmp_path / f"ssd-{n}")
        opts = ClientOptions(
            master=master_url, master_config=MasterConfig(**MASTER), rpc_timeout_s=20.0
        )
        written: dict[str, bytes] = {}
        with Client(opts).setup() as c:
            for i in range(48):
                written[f"obj/{i:03d}"] = os.urandom(OBJ)
                c.put(f"obj/{i:03d}", written[f"obj/{i:03d}"])
                wait_offloaded(c, list(written))
            before = {k: c.stat(k) for k in written}
            assert sum(1 for i in before.values() if not i.replicas) >= 16
            subs = {n: node_ssd(p)["resubscribes"] for n, p in nodes.items()}
            first.stop(signal.SIGKILL)
            deadline = time.monotonic() + 30
            while (new := _leader(masters)) is None:
                assert time.monotonic() < deadline, "no new leader"
                time.sleep(0.05)
            while not all(
                (h := node_ssd(p))["subscribed"] and h["resubscribes"] > subs[n]
                for n, p in nodes.items()
            ):
                assert time.monotonic() < deadline, "a node did not follow the new leader"
                time.sleep(0.05)
            assert {e.key for e in c.list_keys(limit=1000).entries} == set(written)
            for k, info in before.items():
                assert c.stat(k).ssd_segments == info.ssd_segments, k
            for key, data in written.items():
                assert get_retrying(c, key, timeout=30) == data, key
            assert c._m.address == new.address
            assert c._m.get_snapshot().ssd_stages_total > 0  # staged by the new leader
    finally:
        for p in nodes.values():
            p.stop()
            remove_shm_of(p.proc.pid)
        for m in masters:
            m.stop(signal.SIGKILL)
        etcd.stop()
