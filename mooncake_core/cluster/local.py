"""Local launcher: components as subprocesses of this host, each in its own session.

``start_new_session`` makes every component the leader of its own process group, so
stopping it signals the whole group (children included) and a Ctrl-C in the operator's
terminal reaches only the supervisor, which then stops the components in order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from .launcher import Started
from .runstate import PRIVATE_UMASK, ComponentRecord
from .spec import ComponentSpec


class LocalLauncher:
    """Start, probe and stop components on this host.

    Args:
        mooncake: argv prefix that replaces the literal ``mooncake`` (default: this
            interpreter running ``mooncake_cli``, so the exact installed code runs).
    """

    def __init__(self, mooncake: tuple[str, ...] | None = None) -> None:
        self.mooncake = mooncake or (sys.executable, "-m", "mooncake_cli")

    def argv(self, spec: ComponentSpec) -> list[str]:
        """The command line this launcher runs for ``spec``."""
        if spec.argv and spec.argv[0] == "mooncake":
            return [*self.mooncake, *spec.argv[1:]]
        return list(spec.argv)

    def start(self, spec: ComponentSpec, log_path: Path) -> Started:
        """Start ``spec`` detached, logging to ``log_path`` (appended).

        Raises:
            OSError: the executable cannot be started.
        """
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        argv = self.argv(spec)
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as log:
            log.write(
                f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(argv)}\n".encode()
            )
            log.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                umask=PRIVATE_UMASK,
            )
        # The Popen object is dropped on purpose: the component outlives this command.
        # Reap it if it dies while we are still running, so it does not linger as a zombie.
        _ignore_child(proc)
        return Started(
            pid=proc.pid, pgid=proc.pid, argv=tuple(argv), proc_start=proc_start(proc.pid)
        )

    def alive(self, rec: ComponentRecord) -> bool:
        """Whether the recorded process still runs (and is the same process)."""
        start = proc_start(rec.pid)
        if start is None:
            return False
        return rec.proc_start is None or start == rec.proc_start

    def group_alive(self, rec: ComponentRecord) -> bool:
        """Whether any process of the recorded group is left."""
        try:
            os.killpg(rec.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not _only_zombies(rec.pgid)

    def stop(self, rec: ComponentRecord, grace_s: float = 10.0) -> bool:
        """SIGTERM the component's group, then SIGKILL after ``grace_s``.

        Returns:
            True if it had to be killed.
        """
        if not self.alive(rec) and not self.group_alive(rec):
            return False
        _signal_group(rec.pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            _reap()
            if not self.group_alive(rec):
                return False
            time.sleep(0.05)
        _signal_group(rec.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while self.group_alive(rec) and time.monotonic() < deadline:
            _reap()
            time.sleep(0.05)
        return True

    def tail(self, rec: ComponentRecord, n: int) -> list[str]:
        """The last ``n`` lines of the component's log."""
        return tail_file(Path(rec.log_path), n)

    def follow(self, rec: ComponentRecord, n: int) -> Iterator[str]:
        """Yield the last ``n`` lines, then new lines as they are written (until interrupted)."""
        path = Path(rec.log_path)
        yield from tail_file(path, n)
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            while True:
                line = f.readline()
                if line:
                    yield line.decode(errors="replace").rstrip("\n")
                else:
                    time.sleep(0.2)


def tail_file(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of ``path`` (empty if it does not exist)."""
    try:
        with open(path, "rb") as f:
            lines: deque[bytes] = deque(f, maxlen=max(n, 0))
    except OSError:
        return []
    return [line.decode(errors="replace").rstrip("\n") for line in lines]


def proc_start(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks, or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _only_zombies(pgid: int) -> bool:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


_children: list[subprocess.Popen[bytes]] = []


def _ignore_child(proc: subprocess.Popen[bytes]) -> None:
    _children.append(proc)


def _reap() -> None:
    for proc in list(_children):
        if proc.poll() is not None:
            _children.remove(proc)
