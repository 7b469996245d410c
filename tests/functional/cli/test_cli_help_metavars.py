"""Every command's ``--help``, walked from the typer app: a flag shows no value type.

typer's rich help printed ``<bool>`` after every flag (``--version <bool>``, ``--json
<bool>``) as if it took a value; options that do take one keep their type.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from mooncake_cli.main import app


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The command path of ``cmd`` and of every command under it (a group has
    ``commands``; typer vendors its own click, so no isinstance against click's)."""
    found = [path]
    if hasattr(cmd, "commands"):
        for name, sub in sorted(cmd.commands.items()):
            found += _paths(sub, (*path, name))
    return found


def test_no_command_help_shows_a_metavar_after_a_flag() -> None:
    root = typer.main.get_command(app)
    paths = _paths(root)
    assert len(paths) > 40 and ("store", "ls") in paths
    runner = CliRunner()
    bad = []
    for path in paths:
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}, prog_name="mooncake")
        assert res.exit_code == 0, (path, res.output[-500:])
        if "<bool>" in res.output:
            bad.append(" ".join(path) or "(root)")
        if path == ("store", "ls"):
            # Options with a value still say what it is.
            assert "<int range>" in res.output and "<path>" in res.output
            line = next(ln for ln in res.output.splitlines() if "--json" in ln)
            assert "<" not in line, line
    assert not bad, f"`<bool>` after a flag in the help of: {bad}"
