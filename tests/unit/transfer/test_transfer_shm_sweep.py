"""Stale /dev/shm segment files of dead engines are swept; live ones are kept."""

import os
import subprocess
import sys
from pathlib import Path

from mooncake_core.transfer.region import sweep_stale_shm


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_files_of_dead_pids(tmp_path: Path) -> None:
    dead = tmp_path / f"mooncake-{_dead_pid()}-0123456789abcdef"
    live = tmp_path / f"mooncake-{os.getpid()}-0123456789abcdef"
    other = tmp_path / "mooncake-notapid-0123456789abcdef"
    unrelated = tmp_path / "something-else"
    for f in (dead, live, other, unrelated):
        f.write_bytes(b"x")
    assert sweep_stale_shm(str(tmp_path)) == 1
    assert not dead.exists()
    assert live.exists() and other.exists() and unrelated.exists()


def test_sweep_of_missing_directory_is_a_no_op(tmp_path: Path) -> None:
    assert sweep_stale_shm(str(tmp_path / "absent")) == 0


def test_ledgers_of_a_dead_segment_owner_are_swept_with_its_segment(tmp_path: Path) -> None:
    seg = f"mooncake-{_dead_pid()}-0123456789abcdef"
    kept = f"mooncake-{os.getpid()}-0123456789abcdef"
    for name in (seg, f"{seg}.peer-{os.getpid()}-0a1b2c3d", kept, f"{kept}.peer-1-0a1b2c3d"):
        (tmp_path / name).write_bytes(b"x")
    assert sweep_stale_shm(str(tmp_path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept, f"{kept}.peer-1-0a1b2c3d"]
