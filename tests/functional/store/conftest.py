"""Fixture starting real master processes; see store_proc_support."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from store_proc_support import MasterProc, start_master_process


@pytest.fixture
def start_master(tmp_path: Path) -> Iterator[Callable[..., MasterProc]]:
    """Factory: ``start_master(client_ttl_s=1.0, extra=["--secret-file", f])``.

    At teardown the master gets SIGTERM and must exit 0 within 10 s.
    """
    started: list[MasterProc] = []

    def start(extra: list[str] | None = None, **master_cfg: object) -> MasterProc:
        m = start_master_process(tmp_path, master_cfg, extra or [])
        started.append(m)
        return m

    yield start
    for m in started:
        if m.proc.poll() is None:
            m.proc.send_signal(signal.SIGTERM)
            try:
                rc = m.proc.wait(10)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                raise AssertionError("master ignored SIGTERM") from None
            assert rc == 0, "".join(m.log)[-3000:]
