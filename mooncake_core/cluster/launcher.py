"""The launcher interface shared by the local and SSH launchers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .runstate import ComponentRecord
from .spec import ComponentSpec


@dataclass(frozen=True, slots=True)
class Started:
    """A process a launcher started."""

    pid: int
    pgid: int
    argv: tuple[str, ...]
    proc_start: int | None = None
    version: str = ""
    """Version of the package that runs it, when the launcher knows it (remote hosts)."""


class Launcher(Protocol):
    """Starts, probes and stops components on one kind of host."""

    def start(self, spec: ComponentSpec, log_path: Path) -> Started:
        """Start ``spec`` in the background with its output in ``log_path``."""
        ...

    def alive(self, rec: ComponentRecord) -> bool:
        """Whether the recorded main process still runs."""
        ...

    def group_alive(self, rec: ComponentRecord) -> bool:
        """Whether any process of its group is left."""
        ...

    def stop(self, rec: ComponentRecord, grace_s: float = 10.0) -> bool:
        """SIGTERM the group, SIGKILL after ``grace_s``; True if it had to be killed."""
        ...

    def tail(self, rec: ComponentRecord, n: int) -> list[str]:
        """The last ``n`` log lines."""
        ...

    def follow(self, rec: ComponentRecord, n: int) -> Iterator[str]:
        """The last ``n`` log lines, then new ones as they come."""
        ...
