"""Run state files, the cluster secret, port ownership, drain classification."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mooncake_core.cluster import (
    ClusterError,
    ComponentRecord,
    RunState,
    ensure_secret,
    port_in_use,
)
from mooncake_core.cluster.drain import NodeScan, classify, node_segments
from mooncake_core.cluster.ssh import _shell_path
from mooncake_core.store import (
    ObjectInfo,
    ObjectState,
    PinLevel,
    SegmentSnapshot,
    SegmentState,
    Slice,
)


def _rec(name: str = "master", pid: int = 10) -> ComponentRecord:
    return ComponentRecord(
        name=name, role="master", host="local", address="127.0.0.1", pid=pid, pgid=pid,
        ports={"master.port": 1}, argv=["mooncake", "master"], log_path="/x.log",
        started_at=1.5, probe_kind="http", probe_target="http://127.0.0.1:1/health",
        hashing={"block_size": 16},
    )  # fmt: skip


def test_run_state_round_trip_and_remove(tmp_path: Path) -> None:
    st = RunState(tmp_path)
    assert st.all() == [] and st.load("master") is None
    st.save(_rec())
    st.save(_rec("store-0", 11))
    assert st.load("master") == _rec()
    assert [r.name for r in st.all()] == ["master", "store-0"]
    assert st.log_path("store-0") == tmp_path / "logs" / "store-0.log"
    (tmp_path / "run" / "broken.json").write_text("{not json")
    assert [r.name for r in st.all()] == ["master", "store-0"]  # unreadable files are skipped
    st.remove("master")
    st.remove("master")
    assert [r.name for r in st.all()] == ["store-0"]
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_secret_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "d" / "secret"
    assert ensure_secret(path) is True
    text = path.read_text().strip()
    assert len(text) == 64 and int(text, 16) >= 0
    assert path.stat().st_mode & 0o777 == 0o600
    assert ensure_secret(path) is False and path.read_text().strip() == text
    os.chmod(path, 0o644)
    with pytest.raises(ClusterError, match=f"chmod 600 {path}"):
        ensure_secret(path)


def test_port_in_use_names_the_listener() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        use = port_in_use("127.0.0.1", port)
        assert use is not None and use.pid == os.getpid()
        assert use.describe("master.port").startswith(
            f"port {port} on 127.0.0.1 (master.port) is in use by pid {os.getpid()} ("
        )
    assert port_in_use("127.0.0.1", port) is None


def _seg(name: str, client: str, state: SegmentState = SegmentState.MOUNTED) -> SegmentSnapshot:
    return SegmentSnapshot(name, client, state, 100, 0, 0, "", "cpu:0", 1, 100)


def _obj(*replicas: tuple[str, ...]) -> ObjectInfo:
    reps = tuple(tuple(Slice(seg, 0, 1) for seg in r) for r in replicas)
    return ObjectInfo("k", 1, ObjectState.COMPLETE, reps, 0.0, 0.0, PinLevel.NONE, None)


def test_node_segments_and_classify() -> None:
    segs = [
        _seg("store-0", "store-0"),
        _seg("store-0/ssd", "store-0"),
        _seg("store-10", "store-10"),
    ]
    assert [s.name for s in node_segments(segs, "store-0")] == ["store-0", "store-0/ssd"]
    node = frozenset({"store-0", "store-0/ssd"})
    assert classify(_obj(("store-1",)), node) == (False, False)
    assert classify(_obj(("store-0",)), node) == (True, True)
    assert classify(_obj(("store-0",), ("store-1",)), node) == (True, False)
    # A replica with one slice on the node is not a copy elsewhere.
    assert classify(_obj(("store-1", "store-0/ssd")), node) == (True, True)


def test_scan_drained_only_when_every_segment_is() -> None:
    scan = NodeScan("n", ("a", "b"), ("DRAINED", "DRAINING"), 3, 1, ())
    assert not scan.drained
    assert NodeScan("n", ("a",), ("DRAINED",), 0, 0, ()).drained
    assert not NodeScan("n", (), (), 0, 0, ()).drained


def test_remote_paths_expand_home_on_the_remote_side() -> None:
    assert _shell_path("~/.mooncake") == '"$HOME"/.mooncake'
    assert _shell_path("~") == '"$HOME"'
    assert _shell_path("/tmp/a b") == "'/tmp/a b'"
