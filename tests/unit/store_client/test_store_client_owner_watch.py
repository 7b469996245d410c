"""A same-host write counts only while the segment's owner process runs: OwnerWatch
tells a running owner from one that exited (a zombie included), with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from mooncake_core.store.client.data import OwnerWatch


def _path(pid: int) -> str:
    return f"/dev/shm/mooncake-{pid}-0a1b"


def test_a_running_owner_then_a_zombie_then_a_reaped_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    w = OwnerWatch()
    try:
        assert w.exited(_path(child.pid)) is None
        assert w.exited(_path(child.pid)) is None  # the cached pidfd, polled again
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while w.exited(_path(child.pid)) is None:  # a zombie: not reaped yet
            assert time.monotonic() < deadline, "the owner's exit was never seen"
            time.sleep(0.01)
        with open(f"/proc/{child.pid}/stat", "rb") as f:
            assert f.read().rpartition(b")")[2].split()[0] == b"Z"
        child.wait()
        assert w.exited(_path(child.pid)) == child.pid  # reaped: still gone
        fresh = OwnerWatch()  # first seen after the exit: no pidfd to open
        assert fresh.exited(_path(child.pid)) == child.pid
    finally:
        child.kill()
        child.wait()
        w.close()


def test_names_that_do_not_say_an_owner_are_not_judged() -> None:
    w = OwnerWatch()
    assert w.exited("/dev/shm/other-file") is None
    assert w.exited("") is None


def test_close_releases_the_pidfds() -> None:
    w = OwnerWatch()
    before = len(os.listdir("/proc/self/fd"))
    assert w.exited(_path(os.getpid())) is None
    assert len(os.listdir("/proc/self/fd")) == before + 1
    w.close()
    assert len(os.listdir("/proc/self/fd")) == before
