"""A real master started as upstream's scripts start it (``mooncake_master``).

Its own module, not ``conftest``: another folder's ``conftest`` may already hold that
name in ``sys.modules``, and ``from conftest import ...`` would then read the wrong one.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_helpers = Path(__file__).resolve().parents[1] / "store_client"
if str(_helpers) not in sys.path:
    sys.path.insert(0, str(_helpers))

from store_client_procs import free_port  # noqa: E402

READY = re.compile(r"serving on ([\d.]+):(\d+) \(metrics on [\d.]+:(\d+)")
LEASE_MS = 500


@dataclass
class UpstreamMaster:
    """A running ``mooncake_master`` and its addresses."""

    proc: subprocess.Popen[bytes]
    address: str
    metrics: str


def start_master(*flags: str, timeout: float = 60.0) -> UpstreamMaster:
    """``python -m mooncake.master <flags>`` on free ports; waits for its ready line."""
    port = free_port()
    cmd = [sys.executable, "-m", "mooncake.master", f"--port={port}", "--metrics_port=0", *flags]
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env={**os.environ}
    )
    assert proc.stderr is not None
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        r, _, _ = select.select([proc.stderr], [], [], 0.2)
        if r:
            buf += os.read(proc.stderr.fileno(), 65536)
            m = READY.search(buf.decode(errors="replace"))
            if m:
                return UpstreamMaster(proc, f"127.0.0.1:{m.group(2)}", f"127.0.0.1:{m.group(3)}")
    proc.kill()
    raise AssertionError(f"mooncake_master did not start: {buf.decode(errors='replace')[-2000:]}")


def stop_master(m: UpstreamMaster) -> None:
    if m.proc.poll() is None:
        m.proc.terminate()
        try:
            m.proc.wait(15)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()
