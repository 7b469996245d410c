"""Run state: what ``cluster up`` started, kept on disk so any shell can stop or inspect it.

Layout under the cluster's ``state_dir``::

    run/<component>.json   one ComponentRecord per started process (atomic writes)
    logs/<component>.log   its stdout and stderr (local components; remote ones log on
                           their host under the same relative path)
    secret                 the cluster secret (0600), unless ``secret_file`` says otherwise

The directories are 0700 and every file 0600, whatever the umask (components run with
umask 077, see :data:`PRIVATE_UMASK`).

One file per component (not one cluster file) so that ``restart master`` rewrites only
the master's record and two commands never overwrite each other's components.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

RUN_DIR = "run"
LOG_DIR = "logs"
PRIVATE_UMASK = 0o077
"""Umask of components started by ``cluster up``: what they create in the state
directory (journals, audit.db and its -wal/-shm, SSD tier files) is theirs alone."""


def prepare_state_dir(state_dir: Path) -> None:
    """Create ``state_dir`` with ``run/`` and ``logs/``, all mode 0700, and check that it
    takes files (a read-only mount is found here, not halfway through ``up``).

    Raises:
        PermissionError, OSError: with a message naming the directory; ``strerror`` holds
            the reason (e.g. ``Read-only file system``).
    """
    for d in (state_dir, state_dir / RUN_DIR, state_dir / LOG_DIR):
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            if d.stat().st_uid == os.geteuid():
                os.chmod(d, 0o700)
            probe = d / f".probe-{os.getpid()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            probe.unlink()
        except OSError as exc:
            raise type(exc)(
                exc.errno, f"state_dir {state_dir} is not writable ({exc.strerror or exc})"
            ) from None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically with mode 0600 (whatever the umask)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class ComponentRecord:
    """A started component: enough to find, probe and stop it later."""

    name: str
    role: str
    host: str
    address: str
    pid: int
    pgid: int
    ports: dict[str, int]
    argv: list[str]
    log_path: str
    started_at: float
    """Wall-clock start time (seconds since the epoch)."""
    probe_kind: str
    probe_target: str
    remote: bool = False
    proc_start: int | None = None
    """Kernel start time of the pid (``/proc/<pid>/stat`` field 22, local only), so a
    recycled pid is never mistaken for the component."""
    version: str = ""
    """Package version the component runs."""
    config_path: str = ""
    hashing: dict[str, object] = field(default_factory=dict)
    """Block-hashing settings it was started with."""


class RunState:
    """The run directory of one cluster.

    Args:
        state_dir: the cluster's state directory (``~`` already expanded).
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.run_dir = state_dir / RUN_DIR
        self.log_dir = state_dir / LOG_DIR

    def log_path(self, name: str) -> Path:
        """Where component ``name`` logs (on its own host)."""
        return self.log_dir / f"{name}.log"

    def save(self, rec: ComponentRecord) -> None:
        """Write ``rec`` atomically (a reader never sees half a file)."""
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(
            self.run_dir / f"{rec.name}.json", json.dumps(asdict(rec), indent=1, sort_keys=True)
        )

    def load(self, name: str) -> ComponentRecord | None:
        """The record of ``name``, or None if none (or it is unreadable)."""
        path = self.run_dir / f"{name}.json"
        try:
            data = json.loads(path.read_text())
            return ComponentRecord(**data)
        except (OSError, ValueError, TypeError):
            return None

    def all(self) -> list[ComponentRecord]:
        """Every record, in file-name order."""
        if not self.run_dir.is_dir():
            return []
        recs = [self.load(p.stem) for p in sorted(self.run_dir.glob("*.json"))]
        return [r for r in recs if r is not None]

    def remove(self, name: str) -> None:
        """Forget component ``name`` (no error if unknown)."""
        (self.run_dir / f"{name}.json").unlink(missing_ok=True)
