"""docs/cli.md is generated from the typer app; this keeps it from drifting."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REGENERATE = "typer mooncake_cli.main utils docs --name mooncake --output docs/cli.md"


def test_cli_reference_is_current(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "typer",
            "mooncake_cli.main",
            "utils",
            "docs",
            "--name",
            "mooncake",
            "--output",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    current = (ROOT / "docs" / "cli.md").read_text()
    assert current == out.read_text(), f"docs/cli.md is stale: run `{REGENERATE}`"
