"""Helpers of the live benchmarks: the CLI as a subprocess, failing loudly."""

from __future__ import annotations

import os
import subprocess
import sys


def mooncake(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mooncake_cli ARGS`` (wide output), capturing both streams."""
    env = {**os.environ, "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "mooncake_cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def must(p: subprocess.CompletedProcess[str], what: str) -> str:
    """``p``'s stdout; exits with its stderr when it failed."""
    if p.returncode != 0:
        sys.exit(f"{what} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return p.stdout
