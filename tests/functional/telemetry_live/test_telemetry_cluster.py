"""The real embedded cluster (`mooncake cluster up --detach`) serves telemetry from every
component: master, store nodes, workers and the conductor answer the collector, and one
completion shows up as Transfer Engine traffic on the workers' NICs (prefill writes KV
into decode's pool)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mooncake_core.config import ClusterConfig
from mooncake_core.telemetry import Collector, poll_target, targets_from_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

ROLES = {
    "master": "master",
    "store-0": "store",
    "store-1": "store",
    "prefill-0": "prefill",
    "decode-0": "decode",
    "conductor": "conductor",
}


def _free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.add(int(s.getsockname()[1]))
    return sorted(ports)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mooncake_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _config(tmp: Path) -> tuple[Path, dict[str, Any]]:
    cfg: dict[str, Any] = ClusterConfig().model_dump(mode="json", exclude_none=True)
    cfg["state_dir"] = str(tmp / "state")
    cfg["hosts"] = [{"name": "local", "address": "127.0.0.1"}]
    cfg["model"] = {"name": "mooncake-tiny", "layers": 2, "hidden": 64, "intermediate": 128}
    ports = _free_ports(20)
    cfg["master"]["port"], cfg["master"]["metrics_port"] = ports.pop(), ports.pop()
    cfg["master"]["fast_port"] = ports.pop()
    for node in cfg["store_nodes"]:
        node["data_port"], node["metrics_port"] = ports.pop(), ports.pop()
        node["segment_size"] = 16 << 20
    cfg["conductor"]["http_port"] = ports.pop()
    for role in ("prefill_workers", "decode_workers"):
        for w in cfg[role]:
            w["rpc_port"], w["data_port"] = ports.pop(), ports.pop()
            w["metrics_port"] = ports.pop()
            w["local_cache_blocks"] = 256
    cfg["dashboard"]["port"] = ports.pop()
    path = tmp / "mooncake.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, cfg


def _kill_recorded(state_dir: Path) -> None:
    # Safety net when `cluster down` failed: SIGKILL the process groups it recorded.
    for rec_path in (state_dir / "run").glob("*.json"):
        try:
            pid = int(json.loads(rec_path.read_text())["pid"])
            os.killpg(pid, signal.SIGKILL)
        except (OSError, ValueError, KeyError, TypeError):
            continue


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    path, cfg = _config(tmp_path_factory.mktemp("telemetry_cluster"))
    only = [
        a
        for role in ("master", "store", "prefill", "decode", "conductor")
        for a in ("--only", role)
    ]
    up = _cli(
        "cluster", "up", "-c", str(path), "--detach", "--ready-timeout", "90", *only, timeout=150
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield path, cfg
    finally:
        down = _cli("cluster", "down", "-c", str(path), timeout=60)
        if down.returncode != 0:
            _kill_recorded(Path(cfg["state_dir"]))


def test_every_component_serves_telemetry_and_worker_nics_move_kv(
    cluster: tuple[Path, dict[str, Any]],
) -> None:
    _, raw = cluster
    cfg = ClusterConfig.model_validate(raw)
    targets = targets_from_config(cfg)
    assert {t.name: t.role for t in targets} == ROLES

    with Collector(targets, timeout_s=3.0, window_s=30.0) as col:
        before = col.poll()
        prompt = "the quick brown fox jumps over the lazy dog; " * 6  # ~17 KV blocks
        url = f"http://127.0.0.1:{raw['conductor']['http_port']}/v1/completions"
        resp = httpx.post(url, json={"prompt": prompt, "max_tokens": 4}, timeout=60)
        assert resp.status_code == 200, resp.text
        assert resp.json()["timing"]["decode"] == "decode-0"
        time.sleep(0.3)
        view = col.poll()

    nodes = {n.name: n for n in view.nodes}
    assert {n: (v.up, v.error) for n, v in nodes.items()} == {n: (True, None) for n in ROLES}
    assert {n: v.endpoint for n, v in nodes.items()} == {
        **{n: "telemetry" for n in ROLES},
        "master": "snapshot",
    }
    assert all(n.up for n in before.nodes)

    # Prefill wrote the prompt's KV into decode's pool: TE bytes left prefill-0's NIC and
    # arrived on decode-0's, so both show a rate over the two polls.
    nics = {(v.node, v.nic): v for v in view.nics}
    assert {node for node, _ in nics} >= {"prefill-0", "decode-0", "store-0", "store-1"}
    prefill = [v for (node, _), v in nics.items() if node == "prefill-0"]
    decode = [v for (node, _), v in nics.items() if node == "decode-0"]
    assert sum(v.te_tx_bps or 0.0 for v in prefill) > 0, prefill
    assert sum(v.te_rx_bps or 0.0 for v in decode) > 0, decode

    # The raw documents carry the cumulative counters behind those rates.
    by_name = {t.name: t for t in targets}
    pre = poll_target(by_name["prefill-0"], 3.0).telemetry
    dec = poll_target(by_name["decode-0"], 3.0).telemetry
    assert pre is not None and dec is not None
    sent = sum(n["bytes_sent"] for n in pre["snapshots"]["transfer"]["data"]["nics"])
    received = sum(n["bytes_received"] for n in dec["snapshots"]["transfer"]["data"]["nics"])
    assert sent > 0 and received > 0
    assert pre["snapshots"]["engine"]["data"]["prefills"] >= 1
    assert dec["snapshots"]["engine"]["data"]["decoded_tokens"] >= 1

    # A store node serves its Transfer Engine's NICs.
    store = poll_target(by_name["store-0"], 3.0).telemetry
    assert store is not None and store["component"]["role"] == "store"
    assert store["snapshots"]["transfer"]["data"]["nics"]

    # A worker's /metrics parses: engine, KV cache and TE families from the same registry.
    text = httpx.get(f"{by_name['prefill-0'].url}/metrics", timeout=5).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["mooncake_engine_prefills"].samples[0].value >= 1
    assert fams["mooncake_kvcache_blocks"].samples[0].value == 256
    assert sum(x.value for x in fams["mooncake_transfer_nic_sent_bytes"].samples) == sent

    # The conductor's /metrics parses and counts the decision.
    text = httpx.get(f"{by_name['conductor'].url}/metrics", timeout=5).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["mooncake_conductor_decisions"].samples[0].value >= 1
    assert "mooncake_audit_submitted" in fams


def test_top_once_json_lists_the_real_cluster(cluster: tuple[Path, dict[str, Any]]) -> None:
    path, _ = cluster
    res = _cli("top", "-c", str(path), "--once", "--json", "--interval", "0.3", "--audit-db", "")
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)
    nodes = {n["name"]: n["up"] for n in view["nodes"]}
    assert nodes == {n: True for n in ROLES}
    assert {n["node"] for n in view["nics"]} >= {"prefill-0", "decode-0", "store-0", "store-1"}
