"""Same-host Store traffic (the shm transport) shows up on both sides.

A store cluster from `cluster up` (master and two store nodes, real processes), a client
on this host forced onto shm: it writes into the nodes' segment files itself, so no
node sees a byte on its NICs. Each node's `/telemetry` and `/metrics` must still count,
under transport shm, exactly the bytes written into (and read out of) its segment, and
the client's own shm counters the same total.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mooncake_core.config import load_config
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions
from mooncake_core.telemetry import poll_target, targets_from_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NODES = ("store-0", "store-1")


def _cluster_support() -> Any:
    import importlib.util

    here = Path(__file__).resolve().parents[1] / "cluster" / "cluster_support.py"
    spec = importlib.util.spec_from_file_location("cluster_support_shm", here)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cs = _cluster_support()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Path]:
    path, cfg = cs.make_config(tmp_path)
    up = cs.cli("cluster", "up", "-c", str(path), "--detach", "--only", "master", "--only", "store")
    assert up.returncode == 0, up.stderr
    yield path
    cs.cli("cluster", "down", "-c", str(path))
    cs.kill_recorded(Path(cfg["state_dir"]))


def _shm(node_url: str) -> tuple[dict[str, Any], float]:
    """(the node's shm transport entry in /telemetry, its /metrics served bytes)."""
    doc = httpx.get(f"{node_url}/telemetry", timeout=5).json()
    transports = doc["snapshots"]["transfer"]["data"]["transports"]
    (entry,) = [t for t in transports if t["name"] == "shm"]
    text = httpx.get(f"{node_url}/metrics", timeout=5).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    prom = sum(
        s.value
        for s in fams["mooncake_transfer_transport_served_bytes"].samples
        if s.labels.get("transport") == "shm" and s.name.endswith("_total")
    )
    return dict(entry), prom


def test_same_host_writes_move_the_shm_counters_of_node_and_client(cluster: Path) -> None:
    cfg = load_config(cluster)
    urls = {t.name: t.url for t in targets_from_config(cfg) if t.name in NODES}
    assert set(urls) == set(NODES)
    for name in NODES:
        assert poll_target(next(t for t in targets_from_config(cfg) if t.name == name), 3).ok
    before = {n: _shm(u) for n, u in urls.items()}
    assert all(e["served_bytes"] == 0 and p == 0 for e, p in before.values())

    sizes = [4096 * (i + 1) + i for i in range(12)]  # odd sizes: bytes, not pages
    opts = ClientOptions.from_cluster(cfg, transport="shm")
    with Client(opts).setup() as client:
        for i, n in enumerate(sizes):
            client.put(f"shm-count/{i}", os.urandom(n))
        written = sum(sizes)
        mid = {n: _shm(u) for n, u in urls.items()}
        on_node = {n: mid[n][0]["served_bytes"] for n in NODES}
        # Every byte lands on one node or the other, exactly once (replica_num 1).
        assert sum(on_node.values()) == written, on_node
        assert all(mid[n][1] == on_node[n] for n in NODES), "Prometheus disagrees"
        assert sum(mid[n][0]["served_requests"] for n in NODES) == len(sizes)
        # What the nodes saw on their NICs: nothing (it was not tcp).
        assert client.transfer_snapshot().transport("tcp").bytes == 0
        assert client.transfer_snapshot().transport("shm").bytes == written

        for i, n in enumerate(sizes):
            assert len(client.get(f"shm-count/{i}")) == n
        after = {n: _shm(u)[0] for n, u in urls.items()}
        assert sum(after[n]["served_bytes"] for n in NODES) == 2 * written
        assert client.transfer_snapshot().transport("shm").bytes == 2 * written

    # `top` shows it too: as JSON, and as the table a person reads at 80 columns.
    args = ("top", "--once", "--interval", "0.5", "--timeout", "3", "-c", str(cluster))
    res = cs.cli(*args, "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["transports"]
    shm_rows = {r["node"]: r for r in rows if r["transport"] == "shm"}
    assert sum(shm_rows[n]["served_bytes"] for n in NODES) == 2 * written
    table = subprocess.run(
        [sys.executable, "-m", "mooncake_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert table.returncode == 0, table.stderr
    lines = [ln.split() for ln in table.stdout.splitlines()]
    assert {ln[0] for ln in lines if len(ln) > 1 and ln[1] == "shm"} == set(NODES)
