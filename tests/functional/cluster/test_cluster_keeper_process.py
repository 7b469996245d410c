"""The master keeper as a real process: a killed child is started again, SIGTERM ends both."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def test_keeper_restarts_a_killed_child_and_stops_on_sigterm(tmp_path: Path) -> None:
    marks = tmp_path / "starts"
    child = f"open({str(marks)!r}, 'a').write('x'); import time; time.sleep(60)"
    code = (
        "import sys\n"
        "from mooncake_core.cluster.keeper import keep_running, RestartBackoff\n"
        f"sys.exit(keep_running([sys.executable, '-c', {child!r}], report=print,"
        " backoff=RestartBackoff(first_s=0.1)))\n"
    )
    keeper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:

        def starts() -> int:
            return len(marks.read_text()) if marks.exists() else 0

        deadline = time.monotonic() + 20
        while starts() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        kids = subprocess.run(
            ["pgrep", "-P", str(keeper.pid)], capture_output=True, text=True
        ).stdout.split()
        assert len(kids) == 1
        subprocess.run(["kill", "-9", kids[0]], check=True)
        while starts() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert starts() == 2
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(timeout=10) == 0
        assert keeper.stdout is not None
        assert "killed by SIGKILL; restarting it in 0.1 s" in keeper.stdout.read()
    finally:
        if keeper.poll() is None:
            keeper.kill()
