"""Real etcd and real `mooncake master` processes for the durability tests."""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

READY = re.compile(r"serving on ([\d.]+):(\d+) \(metrics on [\d.]+:(\d+)")
ETCD = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    """A started process with its captured stderr."""

    proc: subprocess.Popen[bytes]
    log: list[str] = field(default_factory=list)
    address: str = ""
    metrics_url: str = ""

    def text(self) -> str:
        return "".join(self.log)

    def stop(self, sig: int = signal.SIGTERM, wait_s: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def _drain(stream: IO[bytes], log: list[str]) -> None:
    for line in stream:
        log.append(line.decode(errors="replace"))


def start_etcd(tmp: Path) -> tuple[Proc, str]:
    """An etcd on free loopback ports with its data in ``tmp``; returns it and its URL."""
    assert ETCD is not None
    cport, pport = free_port(), free_port()
    url = f"http://127.0.0.1:{cport}"
    cmd = [
        ETCD,
        "--data-dir", str(tmp / "etcd"),
        "--listen-client-urls", url,
        "--advertise-client-urls", url,
        "--listen-peer-urls", f"http://127.0.0.1:{pport}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
        "--initial-cluster", f"default=http://127.0.0.1:{pport}",
    ]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc = Proc(p)
    assert p.stderr is not None
    threading.Thread(target=_drain, args=(p.stderr, proc.log), daemon=True).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url + "/v3/kv/range", data=b'{"key":"AA=="}')
            urllib.request.urlopen(req, timeout=1).read()
            return proc, url
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.1)
    proc.stop(signal.SIGKILL)
    raise AssertionError(f"etcd did not start: {proc.text()[-2000:]}")


def start_master(tmp: Path, master_cfg: dict[str, Any], extra: list[str], *, port: int = 0) -> Proc:
    """`mooncake master` with the given config fields and flags; waits for the ready line."""
    cfg_file = tmp / f"mooncake-{time.monotonic_ns()}.yaml"
    cfg_file.write_text(yaml.safe_dump({"state_dir": str(tmp), "master": master_cfg}))
    cmd = [sys.executable, "-m", "mooncake_cli", "master", "--config", str(cfg_file)]
    cmd += ["--port", str(port), "--metrics-port", "0", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert p.stderr is not None
    buf = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([p.stderr], [], [], 0.2)
        if ready:
            chunk = os.read(p.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            m = READY.search(buf.decode(errors="replace"))
            if m:
                proc = Proc(p, [buf.decode(errors="replace")], f"{m[1]}:{m[2]}")
                proc.metrics_url = f"http://{m[1]}:{m[3]}"
                threading.Thread(target=_drain, args=(p.stderr, proc.log), daemon=True).start()
                return proc
        if p.poll() is not None:
            break
    p.kill()
    raise AssertionError(f"master did not start: {buf.decode(errors='replace')[-3000:]}")


def health(proc: Proc) -> dict[str, Any]:
    """The master's /health JSON ({} when it does not answer)."""
    try:
        with urllib.request.urlopen(proc.metrics_url + "/health", timeout=1) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data
    except OSError:
        return {}


def role(m: Proc) -> str:
    """A master's readiness state from /health ("exited" once its process has ended)."""
    if m.proc.poll() is not None:
        return "exited"
    return str(health(m).get("readiness", {}).get("state", ""))


async def until(what: str, cond: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``cond`` every 0.1 s until it is truthy and return it; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: timed out"
        await asyncio.sleep(0.1)


async def ha_pair(
    tmp: Path, etcd_urls: list[str], lease_s: int, masters: list[Proc]
) -> tuple[Proc, Proc]:
    """Start two ``--ha`` masters ``m1``, ``m2``, each on its own etcd URL (``etcd://...``),
    into ``masters`` (the caller's list: its cleanup stops whatever started).

    Returns the leader and the other one, once that is a caught-up follower.
    """
    for url, name in zip(etcd_urls, ("m1", "m2"), strict=True):
        ha = ["--ha", url, "--lease-ttl", str(lease_s), "--id", name]
        masters.append(start_master(tmp, {"client_ttl_s": 30.0}, ha))
    leader = await until(
        "a leader", lambda: next((m for m in masters if role(m) == "leader"), None)
    )
    other = next(m for m in masters if m is not leader)
    await until("follower caught up", lambda: health(other)["readiness"].get("caught_up"))
    return leader, other


NODE_READY = re.compile(r"serving segment (\S+) .* at ([\d.]+:\d+) \(health on ([\d.]+:\d+)\)")


def start_node(config: Path, master: str, name: str, size: str = "32MiB") -> Proc:
    """`mooncake store node` hosting one DRAM segment; waits for its ready line."""
    cmd = [sys.executable, "-m", "mooncake_cli", "store", "node", "--name", name]
    cmd += ["--size", size, "--master", master, "--config", str(config), "--metrics-port", "0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert p.stderr is not None
    buf = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([p.stderr], [], [], 0.2)
        if ready:
            chunk = os.read(p.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            if NODE_READY.search(buf.decode(errors="replace").replace("\n", " ")):
                proc = Proc(p, [buf.decode(errors="replace")])
                threading.Thread(target=_drain, args=(p.stderr, proc.log), daemon=True).start()
                return proc
        if p.poll() is not None:
            break
    p.kill()
    raise AssertionError(f"node {name} did not start: {buf.decode(errors='replace')[-3000:]}")


def remove_shm_of(pid: int) -> None:
    """Delete /dev/shm files a killed Transfer Engine could not clean up."""
    import contextlib
    import glob

    for path in glob.glob(f"/dev/shm/mooncake-{pid}-*"):
        with contextlib.suppress(OSError):
            os.unlink(path)


def get_retrying(client: Any, key: str, timeout: float = 15.0) -> bytes:
    """``client.get(key)``, retried while the master answers UNAVAILABLE (restarting)."""
    from mooncake_core.store.errors import UnavailableError

    deadline = time.monotonic() + timeout
    while True:
        try:
            data: bytes = client.get(key)
            return data
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
