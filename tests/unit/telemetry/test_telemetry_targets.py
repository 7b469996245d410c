"""Targets from the config, the run state and --target."""

from __future__ import annotations

import json

import pytest

from mooncake_core.config import ClusterConfig
from mooncake_core.telemetry import (
    Target,
    merge_targets,
    parse_target,
    targets_from_config,
    targets_from_run_state,
)


def test_from_default_config():
    ts = targets_from_config(ClusterConfig())
    assert [(t.name, t.role, t.url) for t in ts] == [
        ("master", "master", "http://127.0.0.1:9003"),
        ("store-0", "store", "http://127.0.0.1:9101"),
        ("store-1", "store", "http://127.0.0.1:9102"),
        ("prefill-0", "prefill", "http://127.0.0.1:9201"),
        ("decode-0", "decode", "http://127.0.0.1:9301"),
        ("conductor", "conductor", "http://127.0.0.1:8000"),
    ]


def test_from_config_skips_workers_without_metrics_port():
    cfg = ClusterConfig.model_validate(
        {"decode_workers": [{"name": "decode-0", "rpc_port": 50081, "data_port": 17201}]}
    )
    names = [t.name for t in targets_from_config(cfg)]
    assert "prefill-0" in names and "decode-0" not in names


def test_from_run_state(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rec = {
        "name": "master",
        "role": "master",
        "address": "127.0.0.1",
        "ports": {"master.port": 5, "master.metrics_port": 6},
    }
    (run / "master.json").write_text(json.dumps(rec))
    rec2 = {"name": "etcd", "role": "etcd", "address": "127.0.0.1", "ports": {"x.client_port": 1}}
    (run / "etcd.json").write_text(json.dumps(rec2))
    (run / "broken.json").write_text("{")
    assert targets_from_run_state(tmp_path) == [Target("master", "master", "http://127.0.0.1:6")]
    assert targets_from_run_state(tmp_path / "none") == []


def test_merge_later_wins_order_kept():
    a = [Target("m", "master", "http://x:1"), Target("s", "store", "http://x:2")]
    b = [Target("s", "store", "http://x:3"), Target("t", "transfer", "http://x:4")]
    assert [t.url for t in merge_targets(a, b)] == ["http://x:1", "http://x:3", "http://x:4"]


def test_parse_target():
    assert parse_target("te=http://127.0.0.1:9/") == Target("te", "transfer", "http://127.0.0.1:9")
    assert parse_target("m:master=http://h:1").role == "master"
    with pytest.raises(ValueError, match="NAME=URL"):
        parse_target("nourl")
    with pytest.raises(ValueError, match="http"):
        parse_target("a=ftp://x")
