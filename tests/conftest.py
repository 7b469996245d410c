"""Suite-wide hooks.

mypy takes about 40 s of one core and nothing it checks changes while the tests run,
so when the session will run ``test_mypy_clean`` it starts mypy in the background as
soon as the tests are collected (at a lower CPU priority); the test then waits for
that run's result. The suite's tests mostly wait on the processes they start, so the
run overlaps them on the other core instead of adding its 40 s at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MYPY_TEST = "tests/unit/project/test_code_quality.py::test_mypy_clean"

_background: dict[str, subprocess.Popen[str]] = {}


def mypy_command() -> list[str]:
    return [sys.executable, "-m", "mypy"]


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.nodeid == MYPY_TEST for item in session.items) and len(session.items) > 1:
        _background["mypy"] = subprocess.Popen(
            mypy_command(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=lambda: os.nice(5),  # the tests that measure time come first
        )


def background_result(name: str, timeout: float) -> tuple[int, str] | None:
    """The exit status and output of the background run ``name``, once it ended;
    ``None`` if none was started (the caller runs it itself)."""
    proc = _background.pop(name, None)
    if proc is None:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return -9, f"timed out after {timeout} s\n{out}"
    return proc.returncode, out


def pytest_sessionfinish(session: pytest.Session) -> None:
    for proc in _background.values():
        proc.kill()
        proc.communicate()
    _background.clear()
