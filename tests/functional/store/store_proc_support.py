"""Start the real `mooncake master` as a subprocess on free ports (fixture in conftest)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

READY = re.compile(r"serving on ([\d.]+):(\d+) \(metrics on [\d.]+:(\d+)")


@dataclass
class MasterProc:
    """A running master: its addresses and captured stderr."""

    proc: subprocess.Popen[bytes]
    address: str
    metrics_url: str
    log: list[str]


def http_get(url: str) -> bytes:
    """GET ``url`` (a master's loopback HTTP endpoint) and return the body."""
    with urllib.request.urlopen(url, timeout=5) as resp:  # loopback only
        return resp.read()  # type: ignore[no-any-return]


def _drain(stream: IO[bytes], log: list[str]) -> None:
    # Keep reading so the master never blocks on a full stderr pipe.
    for line in stream:
        log.append(line.decode(errors="replace"))


def start_master_process(
    tmp_path: Path, master_cfg: dict[str, object], extra: list[str]
) -> MasterProc:
    cfg_file = tmp_path / "mooncake.yaml"
    cfg_file.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": master_cfg}))
    cmd = [sys.executable, "-m", "mooncake_cli", "master", "--config", str(cfg_file)]
    cmd += ["--port", "0", "--metrics-port", "0", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert proc.stderr is not None
    log: list[str] = []
    deadline = time.monotonic() + 30
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            text = buf.decode(errors="replace")
            m = READY.search(text)
            if m:
                log.append(text)
                threading.Thread(target=_drain, args=(proc.stderr, log), daemon=True).start()
                return MasterProc(proc, f"{m[1]}:{m[2]}", f"http://{m[1]}:{m[3]}", log)
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"master did not start: {buf.decode(errors='replace')[-3000:]}")
