"""Keep one process running: restart it whenever it exits without being asked to.

``cluster up`` starts each HA master under a keeper (``mooncake master --respawn``): a
master that crashes, is killed, or steps down after losing its etcd lease (it exits with
status 3 rather than serve fenced writes) is started again at once and rejoins the group
as a follower, catching up from etcd. A detached cluster has no long-running supervisor
process; the keeper is the part of one that the masters need.

The keeper forwards SIGTERM/SIGINT to the child and then exits with it (``cluster
down``); the child is asked to terminate if the keeper itself dies (``PR_SET_PDEATHSIG``),
so no master outlives its keeper. Restarts back off exponentially while the child keeps
dying young, and the back-off resets once a child has run ``stable_s``.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

__all__ = ["RestartBackoff", "describe_exit", "keep_running"]


@dataclass
class RestartBackoff:
    """How long to wait before the next start (sans-IO).

    Args:
        first_s: the delay after a first early exit.
        max_s: the longest delay.
        stable_s: a child that ran this long resets the back-off.
    """

    first_s: float = 0.5
    max_s: float = 10.0
    stable_s: float = 30.0
    failures: int = 0

    def next_delay(self, ran_s: float) -> float:
        """The delay before restarting a child that exited after ``ran_s`` seconds."""
        if ran_s >= self.stable_s:
            self.failures = 0
        delay = min(self.max_s, self.first_s * (2**self.failures))
        self.failures += 1
        return delay


def describe_exit(returncode: int) -> str:
    """``exit status 3`` or ``killed by SIGKILL``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def keep_running(
    argv: Sequence[str],
    *,
    report: Callable[[str], None],
    what: str = "process",
    backoff: RestartBackoff | None = None,
) -> int:
    """Run ``argv`` until SIGTERM/SIGINT, restarting it whenever it exits on its own.

    Call from the main thread (it installs the signal handlers).

    Args:
        argv: the child's command line.
        report: one line per restart (the keeper's log).
        what: the child's name in those lines.
        backoff: the restart policy (default :class:`RestartBackoff`).

    Returns:
        The exit status to leave with: the child's own after a requested stop (0 when it
        was ended by the forwarded signal).
    """
    policy = backoff or RestartBackoff()
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    while True:
        started = time.monotonic()
        child = subprocess.Popen(list(argv), preexec_fn=_die_with_parent)
        rc = child.wait()
        if stopping.is_set():
            return max(rc, 0)
        delay = policy.next_delay(time.monotonic() - started)
        report(f"{what} {describe_exit(rc)}; restarting it in {delay:.1f} s")
        if stopping.wait(delay):
            return 0
