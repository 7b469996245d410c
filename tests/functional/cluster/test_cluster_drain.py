"""`mooncake node drain` while a client reads: reads never fail, every object is moved
off the node (copied when it had no replica elsewhere) with its bytes intact, the node
ends DRAINED and empty, nothing new lands on it; `undrain` makes it allocatable again."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import cli, has_command, kill_recorded, make_config, write_config

from mooncake_core.store import ReplicateConfig, StoreError
from mooncake_core.store.client.async_master import MasterClient

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not has_command("store", "node"), reason="`mooncake store node` is not built yet"
    ),
]


@pytest.fixture
def store_cluster(tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    path, cfg = make_config(tmp_path)
    cfg["master"]["allocation_strategy"] = "random"
    # Dropped replicas wait for readers' leases: keep that wait short.
    cfg["master"]["lease_ttl_s"] = 2.0
    write_config(path, cfg)
    up = cli("cluster", "up", "-c", str(path), "--detach", "--only", "master", "--only", "store")
    assert up.returncode == 0, up.stderr
    yield path, cfg
    cli("cluster", "down", "-c", str(path))
    kill_recorded(Path(cfg["state_dir"]))


def _replicas(address: str, secret: bytes, keys: list[str]) -> dict[str, list[set[str]]]:
    async def go() -> dict[str, list[set[str]]]:
        async with MasterClient(address, client_id="test-stat", secret=secret) as mc:
            out = {}
            for k in keys:
                info = await mc.stat(k)
                out[k] = [{s.segment for s in r} for r in info.replicas]
            return out

    return asyncio.run(go())


def test_drain_while_reading(store_cluster: tuple[Path, dict]) -> None:
    from mooncake_core.store.client import Client

    path, cfg = store_cluster
    secret = (Path(cfg["state_dir"]) / "secret").read_bytes().strip()
    address = f"127.0.0.1:{cfg['master']['port']}"
    client = Client(master=address, secret=secret).setup()
    stop = threading.Event()  # set in finally too: a failed assertion stops the reader
    try:
        values = {f"obj/{i:03d}": random.Random(i).randbytes(32 << 10) for i in range(40)}
        for i, (k, v) in enumerate(values.items()):
            # A third of the objects get a second replica, so some have a copy elsewhere.
            client.put(k, v, ReplicateConfig(replica_num=2 if i % 3 == 0 else 1))
        before = _replicas(address, secret, list(values))
        on_node = {k for k, reps in before.items() if any("store-0" in r for r in reps)}
        sole = {k for k, reps in before.items() if all("store-0" in r for r in reps)}
        assert sole and on_node - sole, "the random placement should give both kinds"

        failures: list[str] = []
        reads = [0]

        def reader() -> None:
            rng = random.Random(7)
            keys = list(values)
            while not stop.is_set():
                k = rng.choice(keys)
                try:
                    if client.get(k) != values[k]:
                        failures.append(f"{k}: wrong bytes")
                except StoreError as exc:
                    failures.append(f"{k}: {exc}")
                reads[0] += 1

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        while reads[0] < 20:  # the reader is going before the drain starts
            threading.Event().wait(0.01)
        res = cli("node", "drain", "store-0", "-c", str(path), "--json", "--wait", "30")
        reads_during = reads[0]
        assert res.returncode == 0, res.stdout + res.stderr
        report = json.loads(res.stdout)
        assert report["states"] == ["DRAINED"] and report["drained"] is True
        assert report["copied"] == len(sole)
        assert report["copied_bytes"] == len(sole) * (32 << 10)
        assert report["dropped"] == len(on_node)
        assert report["failed"] == []
        assert "DRAINING (readable, no new objects)" in res.stderr

        # The node holds nothing; every object kept its replica count off the node.
        after_drain = _replicas(address, secret, list(values))
        for k, reps in after_drain.items():
            assert all("store-0" not in r for r in reps), (k, reps)
            assert len(reps) == len(before[k]) - (k in on_node and k not in sole), (k, reps)
        ls = {
            r["segment"]: r for r in json.loads(cli("node", "ls", "-c", str(path), "--json").stdout)
        }
        assert ls["store-0"]["state"] == "DRAINED"
        assert (ls["store-0"]["objects"], ls["store-0"]["used"]) == (0, 0)

        fresh = {f"new/{i:03d}": bytes([i]) * 4096 for i in range(30)}
        for k, v in fresh.items():
            client.put(k, v)
        after = _replicas(address, secret, list(fresh))
        assert all("store-0" not in seg for reps in after.values() for seg in reps), after

        stop.set()
        t.join(timeout=30)
        assert reads_during > 20 and failures == []
        for k, v in values.items():
            assert client.get(k) == v, k
        for k in fresh:
            assert client.get(k) == fresh[k]

        # Running it again is a no-op that still reports DRAINED.
        again = cli("node", "drain", "store-0", "-c", str(path), "--json", "--wait", "5")
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["copied"] == 0

        undo = cli("node", "undrain", "store-0", "-c", str(path))
        assert undo.returncode == 0, undo.stderr
        assert "store-0 MOUNTED" in undo.stdout
        client.put("back", b"x" * 1000, ReplicateConfig(replica_num=2))
        back = _replicas(address, secret, ["back"])["back"]
        assert sorted(min(r) for r in back) == ["store-0", "store-1"], back

        unknown = cli("node", "drain", "store-9", "-c", str(path))
        assert unknown.returncode == 1
        assert (
            "no segment of store node 'store-9' is mounted (nodes: store-0, store-1)"
            in " ".join(unknown.stderr.split())
        )
    finally:
        stop.set()
        client.close()


def test_ctrl_c_stops_a_drain_between_objects(store_cluster: tuple[Path, dict]) -> None:
    """Ctrl-C during `node drain`: the move stops after the object in hand (exit 130,
    the node stays DRAINING), no replica addition is left pending at the master, every
    object keeps its bytes, and a second run finishes the job."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from mooncake_core.store.client import Client

    path, cfg = store_cluster
    secret = (Path(cfg["state_dir"]) / "secret").read_bytes().strip()
    address = f"127.0.0.1:{cfg['master']['port']}"
    client = Client(master=address, secret=secret).setup()
    try:
        values = {f"obj/{i:03d}": random.Random(i).randbytes(16 << 10) for i in range(400)}
        for k, v in values.items():  # every object only on store-0: each one is copied
            client.put(k, v, ReplicateConfig(preferred_segments=("store-0",)))
        proc = subprocess.Popen(
            [sys.executable, "-m", "mooncake_cli", "node", "drain", "store-0", "-c", str(path)],
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stderr is not None
        assert "DRAINING" in proc.stderr.readline()
        # Let it copy some objects, then interrupt it.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = asyncio.run(_listed_and_counted(address, secret, "store-1"))[0]
            if listed >= 5:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        try:
            _, rest = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 130, rest
        assert "stopping after the object in hand" in rest
        assert "drain stopped after" in rest and "stays DRAINING" in rest
        listed, counted = asyncio.run(_listed_and_counted(address, secret, "store-1"))
        assert 5 <= listed < len(values), rest
        assert counted == listed, "a replica addition was left pending"
        for k, v in values.items():
            assert client.get(k) == v, k

        again = cli("node", "drain", "store-0", "-c", str(path), "--json", "--wait", "30")
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["copied"] == len(values) - listed
    finally:
        client.close()


async def _listed_and_counted(address: str, secret: bytes, segment: str) -> tuple[int, int]:
    """(objects listed on ``segment``, keys the master counts there: pending additions
    included)."""
    async with MasterClient(address, client_id="test-ls", secret=secret) as mc:
        listed = await mc.list_segment_objects(segment, limit=1000)
        snap = await mc.get_snapshot()
        counted = next(s.keys for s in snap.segments if s.name == segment)
        return len(listed.entries), counted
