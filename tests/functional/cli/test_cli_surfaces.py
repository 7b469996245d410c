"""Small operator surfaces, through the installed `mooncake` command as a shell sees it:
shell completion (typer's own, bash/zsh/fish), usage lines that say what a command takes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _mooncake(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # The `mooncake` script itself: completion keys on the program's name.
    exe = Path(sys.executable).with_name("mooncake")
    return subprocess.run(
        [str(exe if exe.exists() else shutil.which("mooncake") or "mooncake"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80", **env},
    )


def test_bash_completion_completes_commands_and_subcommands() -> None:
    # What the sourced bash script runs on <TAB>: the program itself, told the words.
    env = {"_MOONCAKE_COMPLETE": "complete_bash", "COMP_WORDS": "mooncake cluster st"}
    res = _mooncake(**env, COMP_CWORD="2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["status"]
    res = _mooncake(**{**env, "COMP_WORDS": "mooncake clu"}, COMP_CWORD="1")
    assert res.stdout.split() == ["cluster"]


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "_mooncake_completion"),
        ("zsh", "#compdef mooncake"),
        ("fish", "complete --command mooncake"),
    ],
)
def test_completion_scripts_for_each_shell(shell: str, marker: str) -> None:
    res = _mooncake(_MOONCAKE_COMPLETE=f"source_{shell}")
    assert res.returncode == 0 and marker in res.stdout, res.stdout[:500] + res.stderr


def test_help_lists_the_completion_options_and_loadgen_takes_no_command() -> None:
    top = _mooncake("--help").stdout
    assert "--install-completion" in top and "--show-completion" in top
    usage = _mooncake("loadgen", "--help").stdout
    assert "Usage: mooncake loadgen [OPTIONS]" in usage
    assert "COMMAND" not in usage
