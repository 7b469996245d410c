"""ruff and mypy are part of the test suite, so the README's test command is the whole gate."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(
    shutil.which("ruff") is None, reason="ruff not installed (pip install -e .[dev])"
)
def test_ruff_lint_clean() -> None:
    res = _run("ruff", "check", ".")
    assert res.returncode == 0, res.stdout[-4000:]


@pytest.mark.skipif(
    shutil.which("ruff") is None, reason="ruff not installed (pip install -e .[dev])"
)
def test_ruff_format_clean() -> None:
    res = _run("ruff", "format", "--check", ".")
    assert res.returncode == 0, res.stdout[-4000:]


@pytest.mark.slow
def test_mypy_clean() -> None:
    # Started in the background when the tests were collected (tests/conftest.py).
    from tests.conftest import background_result, mypy_command

    got = background_result("mypy", timeout=600)
    if got is None:
        res = _run(*mypy_command())
        got = res.returncode, res.stdout
    assert got[0] == 0, got[1][-4000:]
