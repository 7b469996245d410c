"""The journal's policy comes from mooncake.yaml (master.fsync / fsync_batch_ms / data_dir); a flag overrides it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from durability_proc_support import start_master

pytestmark = [pytest.mark.integration]


@pytest.mark.parametrize(
    ("fields", "flags", "line"),
    [
        ({"fsync": "batch", "fsync_batch_ms": 5.0}, [], "fsync=batch"),
        ({"fsync": "none"}, ["--fsync", "always"], "fsync=always"),
    ],
)
def test_journal_policy_from_config_or_flag(
    tmp_path: Path, fields: dict[str, object], flags: list[str], line: str
) -> None:
    journal = tmp_path / "journal"
    m = start_master(tmp_path, {"data_dir": str(journal), **fields}, flags)
    try:
        ready = "".join(m.log)
        assert f"journal {journal} {line}:" in ready, ready
        assert any(journal.glob("log-*.mj")), list(journal.iterdir())
    finally:
        m.stop(signal.SIGTERM)


def test_bad_fsync_in_config_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"master\.fsync"):
        start_master(tmp_path, {"data_dir": str(tmp_path / "j"), "fsync": "sometimes"}, [])
