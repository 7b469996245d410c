"""`mooncake node drain` while a client reads: reads never fail, nothing new lands on the
drained node, and the report names exactly the objects with no replica elsewhere."""

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
from mooncake_core.store.master_client import MasterClient

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
        stop = threading.Event()

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
        res = cli("node", "drain", "store-0", "-c", str(path), "--json")
        # Objects remain on the node (no read-safe copy in this version): exit 3, and the
        # report is exact.
        assert res.returncode == 3, res.stdout + res.stderr
        report = json.loads(res.stdout)
        assert report["states"] == ["DRAINING"] and report["drained"] is False
        assert report["on_node"] == len(on_node)
        assert set(report["sole"]) == sole
        assert "DRAINING (readable, no new objects)" in res.stderr

        fresh = {f"new/{i:03d}": bytes([i]) * 4096 for i in range(30)}
        for k, v in fresh.items():
            client.put(k, v)
        after = _replicas(address, secret, list(fresh))
        assert all("store-0" not in seg for reps in after.values() for seg in reps), after
        ls = json.loads(cli("node", "ls", "-c", str(path), "--json").stdout)
        states = {r["segment"]: r["state"] for r in ls}
        assert states == {"store-0": "DRAINING", "store-1": "MOUNTED"}

        stop.set()
        t.join(timeout=30)
        assert reads[0] > 0
        assert failures == []
        for k in fresh:
            assert client.get(k) == fresh[k]

        unknown = cli("node", "drain", "store-9", "-c", str(path))
        assert unknown.returncode == 1
        assert (
            "no segment of store node 'store-9' is mounted (nodes: store-0, store-1)"
            in " ".join(unknown.stderr.split())
        )
    finally:
        client.close()
