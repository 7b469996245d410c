"""Is a TCP port free on this host, and if not, which process holds it.

Linux only: the owner is found through ``/proc/net/tcp{,6}`` (listening socket inode)
and ``/proc/<pid>/fd`` links. Without permission to read another user's fds the owner
is reported as unknown, never guessed.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"


@dataclass(frozen=True, slots=True)
class PortUse:
    """A port that is taken: by ``pid`` when known."""

    address: str
    port: int
    pid: int | None

    def describe(self, label: str) -> str:
        """``port 50051 on 127.0.0.1 (master.port) is in use by pid 123 (python)``."""
        who = "another process"
        if self.pid is not None:
            who = f"pid {self.pid} ({_comm(self.pid)})"
        return f"port {self.port} on {self.address} ({label}) is in use by {who}"


def port_in_use(address: str, port: int) -> PortUse | None:
    """Whether binding ``address:port`` would fail because it is taken.

    Args:
        address: the bind address the component will use.
        port: the TCP port.

    Returns:
        None when free; otherwise who holds it.

    Raises:
        OSError: binding fails for another reason (e.g. the address is not on this host).
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # Servers set SO_REUSEADDR, so a TIME_WAIT leftover does not block them either.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return PortUse(address, port, listener_pid(port))
    return None


def listener_pid(port: int) -> int | None:
    """The pid of a process listening on TCP ``port`` (any address), if it can be found."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != _LISTEN:
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in targets:
                        return int(entry.name)
                except OSError:
                    continue
    return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
