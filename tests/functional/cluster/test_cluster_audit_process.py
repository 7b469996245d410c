"""`audit.writer: process` through `mooncake.yaml` and `cluster up`: the conductor writes
its audit from a child process; SIGKILL that process between two loadgen runs and every
request of both runs still has its decision and its outcome, once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from cluster_support import audit_rows, cli, kill_recorded, make_config, replay, write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

CHILD = "mooncake_core.conductor.audit.writer_child"


def write_trace(path: Path, n: int, first_id: int) -> None:
    lines = [
        json.dumps(
            {
                "timestamp": 40 * i,
                "input_length": 512 * 3,
                "output_length": 4,
                "hash_ids": [1, 2, first_id + i],
            }
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")


def writer_children(conductor_pid: int) -> list[int]:
    """Pids of the audit writer processes whose parent is the conductor."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == conductor_pid and CHILD.encode() in cmd:
            out.append(int(entry.name))
    return out


def test_a_killed_audit_writer_process_loses_no_decision(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path, workers=True)
    cfg["audit"]["writer"] = "process"
    write_config(path, cfg)
    c = str(path)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    write_trace(one, 12, 100)
    write_trace(two, 12, 200)
    state = Path(cfg["state_dir"])
    try:
        rep1 = replay(c, one, 12, concurrency=4, max_output=2)
        conductor = json.loads((state / "run" / "conductor.json").read_text())["pid"]
        first = writer_children(conductor)
        assert len(first) == 1, first
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = writer_children(conductor)
            if now and now != first:
                break
            time.sleep(0.1)
        assert now and now != first, "no new audit writer process"
        load = cli("loadgen", "-c", c, "--trace", str(two), "--limit", "12",
                   "--max-output", "2", "--concurrency", "4", "--json", timeout=150)  # fmt: skip
        assert load.returncode == 0, load.stderr[-3000:]
        rep2 = json.loads(load.stdout)
        rows = audit_rows(c)
    finally:
        cli("cluster", "down", "-c", c, timeout=120)
        kill_recorded(state)

    assert rep1["completed"] == 12 and rep2["completed"] == 12, (rep1, rep2)
    ids = [r["request_id"] for r in rows]
    assert len(ids) == 24 == len(set(ids)), ids
    assert all(r["outcome"] == "completed" for r in rows), [r["outcome"] for r in rows]
