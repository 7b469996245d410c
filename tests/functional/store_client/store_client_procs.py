"""Real processes for the store client tests: a master and store nodes on free ports."""

from __future__ import annotations

import contextlib
import glob
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
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions

MASTER_READY = re.compile(r"serving on ([\d.]+):(\d+) \(metrics on [\d.]+:(\d+)")
NODE_READY = re.compile(r"serving segment (\S+) .* at ([\d.]+:\d+) \(health on ([\d.]+:\d+)\)")

TEST_MASTER = {
    "client_ttl_s": 2.0,
    "heartbeat_interval_s": 0.5,
    "unmount_grace_s": 0.5,
    "max_slice_size": 16 << 20,
    "max_object_size": 100 << 20,
}
"""Short TTLs so a killed node expires quickly; 16 MiB slices so 70 MiB spans segments."""


@dataclass
class Proc:
    """A started process, its ready-line match and captured stderr."""

    proc: subprocess.Popen[bytes]
    match: re.Match[str]
    log: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _drain(stream: IO[bytes], log: list[str]) -> None:
    for line in stream:
        log.append(line.decode(errors="replace"))


def spawn(cmd: list[str], ready: re.Pattern[str], timeout: float = 60.0) -> Proc:
    """Start ``python -m mooncake_cli <cmd>`` and wait for ``ready`` on its stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mooncake_cli", *cmd],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stderr], [], [], 0.2)
        if r:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            m = ready.search(re.sub(r"\s+", " ", buf.decode(errors="replace")))
            if m:
                p = Proc(proc, m, [buf.decode(errors="replace")])
                threading.Thread(target=_drain, args=(proc.stderr, p.log), daemon=True).start()
                return p
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"{cmd[:2]} did not start: {buf.decode(errors='replace')[-3000:]}")


def stop(p: Proc, timeout: float = 15.0) -> int:
    """SIGTERM and wait; returns the exit status (kills it if it hangs)."""
    if p.proc.poll() is None:
        p.proc.send_signal(signal.SIGTERM)
        try:
            return p.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()
            raise AssertionError("".join(p.log)[-3000:]) from None
    return p.proc.returncode


def remove_shm_of(pid: int) -> None:
    """Delete /dev/shm files a SIGKILLed Transfer Engine could not clean up."""
    for path in glob.glob(f"/dev/shm/mooncake-{pid}-*"):
        with contextlib.suppress(OSError):
            os.unlink(path)


@dataclass
class Cluster:
    """A master and store nodes; ``config`` is the YAML they were started with."""

    config: Path
    master: Proc
    address: str
    nodes: dict[str, Proc]
    master_settings: dict[str, object] = field(default_factory=dict)
    """Master config fields it was started with on top of TEST_MASTER (its clients are
    configured alike: :func:`make_client`)."""

    def start_node(self, name: str, size: str = "64MiB", master: str | None = None) -> Proc:
        """``mooncake store node NAME``; ``master``: the address it dials (default: the
        cluster's; a proxy's, to cut that node's link alone)."""
        target = master or self.address
        cmd = ["store", "node", "--name", name, "--size", size, "--master", target]
        cmd += ["--config", str(self.config), "--metrics-port", "0"]
        p = spawn(cmd, NODE_READY)
        self.nodes[name] = p
        return p

    def snapshot(self) -> dict[str, Any]:
        """The master's ``/snapshot`` (a MasterSnapshot as JSON)."""
        port = int(self.master.match.group(3))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot", timeout=10) as r:
            return dict(json.loads(r.read()))

    def rpc_calls(self) -> dict[str, float]:
        """Calls the master has served so far, by RPC (``master_rpc_requests_total``)."""
        port = int(self.master.match.group(3))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {
            s.labels["rpc"]: s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "master_rpc_requests_total"
        }

    def close(self) -> None:
        for p in self.nodes.values():
            if p.proc.poll() is None:
                stop(p)
            remove_shm_of(p.proc.pid)
        stop(self.master)


def start_cluster(
    tmp: Path,
    nodes: tuple[str, ...] = ("n0", "n1"),
    secret: bytes | None = None,
    master_settings: dict[str, object] | None = None,
    node_size: str = "64MiB",
) -> Cluster:
    """A real master (TEST_MASTER settings) and one node per name, started in parallel.

    With ``secret`` the config names a secret file: master, nodes and the CLI use it.
    ``master_settings``: master config fields on top of TEST_MASTER; ``node_size``: each
    node's segment.
    """
    cfg = tmp / "mooncake.yaml"
    doc: dict[str, object] = {
        "state_dir": str(tmp),
        "master": {**TEST_MASTER, **(master_settings or {})},
    }
    if secret is not None:
        sf = tmp / "secret"
        sf.write_bytes(secret)
        sf.chmod(0o600)
        doc["secret_file"] = str(sf)
    cfg.write_text(yaml.safe_dump(doc))
    port = free_port()
    master = spawn(
        ["master", "--config", str(cfg), "--port", str(port), "--metrics-port", "0"],
        MASTER_READY,
    )
    c = Cluster(cfg, master, f"127.0.0.1:{port}", {}, dict(master_settings or {}))
    try:
        starters = [threading.Thread(target=c.start_node, args=(n, node_size)) for n in nodes]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        if set(c.nodes) != set(nodes):
            raise AssertionError(f"only {sorted(c.nodes)} of {nodes} started")
    except BaseException:
        c.close()
        raise
    return c


def make_client(c: Cluster, **kw: object) -> Client:
    """A set-up store Client of ``c`` (hosting nothing unless ``segments=`` is given),
    configured with the master settings ``c`` was started with."""
    cfg = MasterConfig(**{**TEST_MASTER, **c.master_settings})  # type: ignore[arg-type]
    opts = ClientOptions(master=c.address, master_config=cfg, **kw)  # type: ignore[arg-type]
    return Client(opts).setup()
