"""Local launcher and start failures with real processes."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cluster_support import (
    cli,
    end_foreground,
    group_gone,
    kill_recorded,
    make_config,
    pid_gone,
)

from mooncake_core.cluster import ComponentRecord, ComponentSpec, LocalLauncher, Probe

pytestmark = pytest.mark.integration


def _spec(script: str) -> ComponentSpec:
    return ComponentSpec(
        name="x", role="master", host="local", address="127.0.0.1",
        argv=("sh", "-c", script), ports={}, probe=Probe("tcp", "127.0.0.1:1"),
    )  # fmt: skip


def _record(spec: ComponentSpec, launcher: LocalLauncher, log: Path) -> ComponentRecord:
    st = launcher.start(spec, log)
    return ComponentRecord(
        name=spec.name, role=spec.role, host="local", address="127.0.0.1", pid=st.pid,
        pgid=st.pgid, ports={}, argv=list(st.argv), log_path=str(log), started_at=time.time(),
        probe_kind="tcp", probe_target="127.0.0.1:1", proc_start=st.proc_start,
    )  # fmt: skip


def test_stop_kills_the_whole_group_after_the_grace(tmp_path: Path) -> None:
    launcher = LocalLauncher()
    # The shell ignores SIGTERM and has a child: both must go.
    rec = _record(
        _spec("trap '' TERM; echo started; sleep 60 & wait"), launcher, tmp_path / "x.log"
    )
    # Until the shell logs "started" its trap may not be set (a SIGTERM would end it
    # without the kill). The launcher's header line quotes the command, "echo started"
    # included: wait for the line itself.
    deadline = time.monotonic() + 30
    while "started" not in launcher.tail(rec, 5) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert launcher.tail(rec, 1) == ["started"], "the shell did not start within 30 s"
    assert launcher.alive(rec) and launcher.group_alive(rec)
    assert launcher.stop(rec, grace_s=0.5) is True  # had to be killed
    assert pid_gone(rec.pid) and group_gone(rec.pgid)
    assert not launcher.alive(rec)
    assert launcher.stop(rec) is False  # already gone: nothing to do
    assert launcher.tail(rec, 1) == ["started"]


def test_recycled_pid_is_not_the_component(tmp_path: Path) -> None:
    launcher = LocalLauncher()
    rec = _record(_spec("sleep 30"), launcher, tmp_path / "x.log")
    assert launcher.alive(rec)
    # Same pid, another kernel start time: a different process that reused the pid.
    stale = replace(rec, proc_start=(rec.proc_start or 0) + 1)
    assert not launcher.alive(stale)
    launcher.stop(rec, grace_s=2)
    assert pid_gone(rec.pid)


def test_component_failing_at_start_shows_its_log(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path)
    state = Path(cfg["state_dir"])
    state.mkdir(parents=True)
    secret = state / "secret"
    secret.write_text("")  # an empty secret: the real master refuses to start
    secret.chmod(0o600)
    try:
        res = cli(
            "cluster", "up", "-c", str(path), "--detach", "--only", "master", "--only", "store"
        )
        assert res.returncode == 1
        err = " ".join(res.stderr.split())
        assert "master exited before it was ready" in err
        assert "| error: cannot read the cluster secret" in err and "is empty" in err
        assert "store-0" not in err  # nothing after the failed component was started
        assert list((state / "run").glob("*.json")) == []
        recs = [json.loads(p.read_text()) for p in (state / "run").glob("*.json")]
        assert recs == []
    finally:
        kill_recorded(state)


def test_foreground_up_exits_once_cluster_down_ran_elsewhere(tmp_path: Path) -> None:
    # `cluster up` in the foreground watches its components; `cluster down` from
    # another terminal stops them all: the watcher says so and exits 0 instead of
    # showing a table of stopped components until someone presses Ctrl-C.
    import os
    import subprocess
    import sys

    path, cfg = make_config(tmp_path)
    log_file = tmp_path / "up.log"
    with open(log_file, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mooncake_cli", "cluster", "up", "-c", str(path),
             "--only", "master"],
            stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, "COLUMNS": "100"},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while cli("cluster", "status", "-c", str(path), "--only", "master").returncode:
                assert proc.poll() is None, log_file.read_text()[-2000:]
                assert time.monotonic() < deadline, "the master did not come up"
                time.sleep(0.5)
            assert proc.poll() is None  # still watching
            assert cli("cluster", "down", "-c", str(path)).returncode == 0
            assert proc.wait(timeout=30) == 0
            text = log_file.read_text()
            assert "every component stopped (mooncake cluster down?): exiting" in text
            assert "shutting down" not in text
        finally:
            end_foreground(proc, path, Path(cfg["state_dir"]))
