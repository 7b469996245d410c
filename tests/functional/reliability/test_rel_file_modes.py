"""Private by default: after ``cluster up`` (master with a journal, store nodes, the
dashboard reading the audit DB that ``db upgrade`` created) under umask 022, the whole
``state_dir`` is 0700 dirs and 0600 files.

The conductor needs model workers; its audit DB is created by the same
``audit.db.make_engine(create_dir=True)`` path that ``db upgrade`` takes, so the walk covers
it without loading a model on the shared test machine.
"""

from __future__ import annotations

import os
import stat
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from cluster_support import cli, kill_recorded, make_config, write_config

pytestmark = pytest.mark.integration


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Path]:
    path, cfg = make_config(tmp_path)
    state = Path(cfg["state_dir"])
    cfg["master"]["data_dir"] = str(state / "journal")
    cfg["master"]["unmount_grace_s"] = 0.0
    cfg["dashboard"]["anonymous_read"] = True  # read the audit page below without a login
    write_config(path, cfg)
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)  # a state_dir someone made by hand, world-readable
    old = os.umask(0o022)
    try:
        only = ("--only", "master", "--only", "store")
        res = cli("cluster", "up", "-c", str(path), "--detach", "--skip-check", *only)
        db = cli("db", "upgrade", "-c", str(path))
        web = cli(
            "cluster", "up", "-c", str(path), "--detach", "--skip-check", "--only", "dashboard"
        )
    finally:
        os.umask(old)
    try:
        assert res.returncode == 0, res.stderr[-3000:]
        assert db.returncode == 0, db.stderr[-3000:]
        assert web.returncode == 0, web.stderr[-3000:]
        # The dashboard opens the audit DB (WAL: -wal and -shm appear beside it).
        url = f"http://127.0.0.1:{cfg['dashboard']['port']}/api/audit/decisions"
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.status == 200
        yield state
    finally:
        cli("cluster", "down", "-c", str(path))
        kill_recorded(state)


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in [*dirnames, *filenames]:
            p = Path(dirpath) / n
            st = p.lstat()
            if stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode):
                continue
            out[str(p.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


def test_state_dir_is_private_after_cluster_up(up: Path) -> None:
    modes = _modes(up)
    print("state_dir modes:", {k: oct(v) for k, v in sorted(modes.items())})
    names = set(modes)
    # What the issue names is really there (so the walk checks something).
    for want in ("secret", "audit.db", "run/master.json", "logs/master.log", "journal"):
        assert want in names, sorted(names)
    loose = {
        k: oct(v)
        for k, v in modes.items()
        if v & 0o077 or ((up / k).is_dir() and v != 0o700) or ((up / k).is_file() and v != 0o600)
    }
    assert not loose, loose
