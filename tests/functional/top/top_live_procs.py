"""Start a live set of real processes for ``mooncake top``: a master, two store nodes and a
Transfer Engine pair (one reading from the other in a loop) serving /telemetry.

Used by the tests (conftest.py) and by top_demo.py (the hand checks in docs/tui.md)."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mooncake_core.telemetry import Target

HERE = Path(__file__).parent
MASTER_READY = re.compile(r"serving on [\d.]+:(\d+) \(metrics on [\d.]+:(\d+)")
NODE_READY = re.compile(r"serving segment \S+ .* \(health on ([\d.]+:\d+)\)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(argv: list[str], ready: re.Pattern[str], timeout: float = 60.0):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert proc.stderr is not None
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        r, _, _ = select.select([proc.stderr], [], [], 0.2)
        if r:
            chunk = os.read(proc.stderr.fileno(), 65536)
            buf += chunk
            m = ready.search(buf.decode(errors="replace").replace("\n", " "))
            if m:
                # Keep draining so the child never blocks on a full stderr pipe.
                threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
                return proc, m
    proc.kill()
    raise RuntimeError(f"{argv[3:5]} did not start: {buf.decode(errors='replace')[-2000:]}")


@dataclass
class LiveCluster:
    """The processes and the targets a Collector should poll."""

    config: Path
    targets: list[Target]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def kill(self, name: str) -> None:
        p = self.procs[name]
        p.kill()
        p.wait(10)

    def target_args(self) -> list[str]:
        """``--target`` options naming every target (for the CLI)."""
        out = []
        for t in self.targets:
            out += ["--target", f"{t.name}:{t.role}={t.url}"]
        return out


def start_live(tmp: Path) -> LiveCluster:
    """Start the master, ``store-a``, ``store-b``, ``te-target`` and ``te-reader``.

    Raises:
        RuntimeError: A process did not start (the others are stopped).
    """
    cfg = tmp / "mooncake.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"state_dir": str(tmp), "master": {"client_ttl_s": 2.0, "heartbeat_interval_s": 0.5}}
        )
    )
    mc = [sys.executable, "-m", "mooncake_cli"]
    cluster = LiveCluster(cfg, [])
    try:
        rpc = _free_port()
        master, m = _spawn(
            [*mc, "master", "--config", str(cfg), "--port", str(rpc), "--metrics-port", "0"],
            MASTER_READY,
        )
        cluster.procs["master"] = master
        cluster.targets.append(Target("master", "master", f"http://127.0.0.1:{m.group(2)}"))
        for name in ("store-a", "store-b"):
            argv = [*mc, "store", "node", "--name", name, "--size", "16MiB"]
            argv += ["--master", f"127.0.0.1:{rpc}", "--config", str(cfg), "--metrics-port", "0"]
            p, m = _spawn(argv, NODE_READY)
            cluster.procs[name] = p
            cluster.targets.append(Target(name, "store", f"http://{m.group(1)}"))
        te = [sys.executable, str(HERE / "top_te_proc.py")]
        target = subprocess.Popen(
            [*te, "--name", "te-target"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        cluster.procs["te-target"] = target
        info = json.loads(target.stdout.readline())  # type: ignore[union-attr]
        cluster.targets.append(Target("te-target", "transfer", info["telemetry_url"]))
        reader = subprocess.Popen(
            [*te, "--name", "te-reader", "--read", info["segment_name"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        cluster.procs["te-reader"] = reader
        info = json.loads(reader.stdout.readline())  # type: ignore[union-attr]
        cluster.targets.append(Target("te-reader", "transfer", info["telemetry_url"]))
    except BaseException:
        stop_live(cluster)
        raise
    return cluster


def stop_live(cluster: LiveCluster) -> None:
    """Stop every process (TE processes exit when their stdin closes; others on SIGTERM)."""
    for p in reversed(list(cluster.procs.values())):
        if p.poll() is None:
            if p.stdin is not None:
                p.stdin.close()
            else:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
