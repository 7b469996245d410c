"""`mooncake cluster up/status/logs/restart/down` with real processes on loopback."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import (
    cli,
    free_block,
    group_gone,
    has_command,
    kill_recorded,
    make_config,
    pid_gone,
    write_config,
)

from mooncake_core.cluster import port_in_use

pytestmark = pytest.mark.integration

needs_store_node = pytest.mark.skipif(
    not has_command("store", "node"), reason="`mooncake store node` is not built yet"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    path, cfg = make_config(tmp_path)
    # `restart store-1` waits out the master's unmount grace before the node re-mounts its
    # segment; no grace keeps the test short.
    cfg["master"]["unmount_grace_s"] = 0.0
    write_config(path, cfg)
    yield path, cfg
    cli("cluster", "down", "-c", str(path))
    kill_recorded(Path(cfg["state_dir"]))


def _records(cfg: dict) -> dict[str, dict]:
    run = Path(cfg["state_dir"]) / "run"
    return {p.stem: json.loads(p.read_text()) for p in run.glob("*.json")}


@needs_store_node
def test_up_status_no_duplicates_restart_down(cluster: tuple[Path, dict]) -> None:
    path, cfg = cluster
    c = str(path)
    only = ["--only", "master", "--only", "store"]
    res = cli("cluster", "up", "-c", c, "--detach", *only)
    assert res.returncode == 0, res.stderr
    assert "generated the cluster secret" in res.stderr
    secret = Path(cfg["state_dir"]) / "secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert len(secret.read_text().strip()) == 64  # 32 random bytes, hex

    recs = _records(cfg)
    assert set(recs) == {"master", "store-0", "store-1"}
    for rec in recs.values():
        assert "--config" in rec["argv"] and str(path) in rec["argv"]
        assert "--secret-file" in rec["argv"] and str(secret) in rec["argv"]
        assert Path(rec["log_path"]).is_file()

    st = cli("cluster", "status", "-c", c, "--json", *only)
    assert st.returncode == 0, st.stdout + st.stderr
    data = json.loads(st.stdout)
    states = {r["name"]: r["state"] for r in data["components"]}
    assert states == {"master": "healthy", "store-0": "healthy", "store-1": "healthy"}
    assert data["store"]["total_capacity_bytes"] == 2 * (16 << 20)
    assert {s["name"] for s in data["store"]["segments"]} >= {"store-0", "store-1"} or len(
        data["store"]["segments"]
    ) == 2
    # The full status (conductor not started) is not healthy, and says so in its exit code.
    assert cli("cluster", "status", "-c", c).returncode == 1

    again = cli("cluster", "up", "-c", c, "--detach", *only)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("already running") == 3
    assert {k: v["pid"] for k, v in _records(cfg).items()} == {k: v["pid"] for k, v in recs.items()}

    logs = cli("cluster", "logs", "master", "-c", c, "-n", "5")
    assert logs.returncode == 0 and "serving on" in logs.stdout
    follow = subprocess.Popen(
        [sys.executable, "-m", "mooncake_cli", "cluster", "logs", "store-0", "-c", c, "-f"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        first = [follow.stdout.readline() for _ in range(2)]
        assert "serving segment store-0" in "".join(first), first
    finally:
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 0

    rs = cli("cluster", "restart", "store-1", "-c", c)
    assert rs.returncode == 0, rs.stderr
    new = _records(cfg)["store-1"]
    assert new["pid"] != recs["store-1"]["pid"] and pid_gone(recs["store-1"]["pid"])
    recs["store-1"] = new

    down = cli("cluster", "down", "-c", c)
    assert down.returncode == 0, down.stderr
    # Reverse dependency order: the master goes last.
    order = [line.split(":")[0] for line in down.stderr.splitlines() if "stopping" in line]
    assert order[-1] == "master" and set(order) == set(recs)
    for rec in recs.values():
        assert pid_gone(rec["pid"]) and group_gone(rec["pgid"]), rec["name"]
        for label, port in rec["ports"].items():
            assert port_in_use("127.0.0.1", port) is None, label
    assert _records(cfg) == {}
    assert cli("cluster", "status", "-c", c, *only).returncode == 1


def test_port_in_use_is_reported(cluster: tuple[Path, dict]) -> None:
    path, cfg = cluster
    port = cfg["master"]["port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        res = cli("cluster", "up", "-c", str(path), "--detach", "--only", "master")
    assert res.returncode == 1
    text = " ".join((res.stdout + res.stderr).split())
    import os

    assert f"port {port} on 127.0.0.1 (master.port) is in use by pid {os.getpid()}" in text
    assert "change master.port" in text
    assert _records(cfg) == {}


def test_master_only_cluster_and_hashing_mismatch(
    cluster: tuple[Path, dict], tmp_path: Path
) -> None:
    path, cfg = cluster
    res = cli("cluster", "up", "-c", str(path), "--detach", "--only", "master")
    assert res.returncode == 0, res.stderr
    ok = cli("cluster", "check", "-c", str(path), "--json")
    assert ok.returncode == 0, ok.stdout
    checks = {r["check"]: r for r in json.loads(ok.stdout)}
    assert checks["hashing"]["ok"] and "block_size=16" in checks["hashing"]["message"]
    assert checks["ports"]["ok"]  # the master's own ports do not count as taken

    # The operator edits the config while the master runs: block size 32. Components
    # started now would disagree with the running master; check says so and how to fix.
    changed = dict(cfg, hashing={"block_size": 32, "seed": 0})
    other = tmp_path / "changed.yaml"
    write_config(other, changed)
    bad = cli("cluster", "check", "-c", str(other), "--json")
    assert bad.returncode == 1
    fails = [r for r in json.loads(bad.stdout) if not r["ok"]]
    assert [r["check"] for r in fails] == ["hashing"]
    assert "master" in fails[0]["message"] and "block_size=16" in fails[0]["message"]
    assert "block_size=32" in fails[0]["message"]
    assert "restart" in fails[0]["fix"]
    up = cli("cluster", "up", "-c", str(other), "--detach", "--only", "store")
    assert up.returncode == 1 and "cluster check failed" in up.stderr


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")
@needs_store_node
def test_etcd_and_two_ha_masters(cluster: tuple[Path, dict]) -> None:
    path, cfg = cluster
    cfg["etcd"] = {
        "enabled": True,
        # Never a port make_config gave a component: a port is free only until bound.
        "client_port": free_block(1),
        "peer_port": free_block(1),
        "masters": 2,
    }
    # Extra masters take the next ports up: leave room above each of the two.
    base = free_block(4)
    cfg["master"]["port"], cfg["master"]["metrics_port"] = base, base + 2
    write_config(path, cfg)
    only = ["--only", "etcd", "--only", "master", "--only", "store"]
    up = cli("cluster", "up", "-c", str(path), "--detach", *only)
    assert up.returncode == 0, up.stderr
    order = [line.split(":")[0] for line in up.stderr.splitlines() if line.endswith(": ready")]
    assert order == ["etcd", "master", "master-1", "store-0", "store-1"]
    recs = _records(cfg)
    assert "--ha" in recs["master-1"]["argv"] and str(base + 1) in recs["master-1"]["argv"]
    # cluster status says which master leads and whether the other could take over
    # (a follower is ready only when caught up; it may need a moment after start).
    deadline = time.monotonic() + 15
    while True:
        st = cli("cluster", "status", "-c", str(path), "--json", *only)
        assert st.returncode == 0, st.stdout
        rows = {c["name"]: c for c in json.loads(st.stdout)["components"]}
        details = sorted(rows[m]["detail"] for m in ("master", "master-1"))
        if details[0].startswith("follower, caught up") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert details[0].startswith("follower, caught up (seq "), details
    assert details[1].startswith("leader (ha, seq "), details
    table = cli("cluster", "status", "-c", str(path), *only)
    assert "follower, caught up" in table.stdout and "leader (ha" in table.stdout, table.stdout
    assert cli("cluster", "check", "-c", str(path)).returncode == 0
    down = cli("cluster", "down", "-c", str(path))
    assert down.returncode == 0
    for rec in recs.values():
        assert group_gone(rec["pgid"]), rec["name"]
