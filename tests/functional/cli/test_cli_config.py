"""`mooncake config` and `mooncake --help` as a user runs them (real subprocesses)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mooncake_cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_show_prints_effective_config_as_json() -> None:
    res = run("config", "show", "--format", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["master"]["port"] == 50051 and len(data["store_nodes"]) == 2


def test_show_names_the_file_it_loaded(tmp_path: Path) -> None:
    # From the repository root: ./mooncake.yaml.
    here = run("config", "show")
    assert f"config: {ROOT / 'mooncake.yaml'}" in here.stderr, here.stderr
    # Elsewhere, nothing given: the embedded default, and it says so.
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run("config", "show", cwd=empty)
    assert res.returncode == 0 and "config: the embedded default" in res.stderr, res.stderr
    # -c names its file; stdout stays YAML that loads back.
    own = tmp_path / "own.yaml"
    own.write_text(res.stdout)
    again = run("config", "show", "-c", str(own), cwd=empty)
    assert f"config: {own}" in again.stderr and again.stdout == res.stdout


def test_validate_accepts_shipped_file() -> None:
    res = run("config", "validate", "mooncake.yaml")
    assert res.returncode == 0 and "valid" in res.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("master:\n  port: fifty\n", "master.port: Input should be a valid integer"),
        ("master:\n  lease_ttl_s: -3\n", "master.lease_ttl_s: Input should be greater than 0"),
        ("master:\n  leese_ttl_s: 3\n", "master.leese_ttl_s: unknown key"),
    ],
)
def test_validate_rejects_and_names_key(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    res = run("config", "validate", str(f))
    assert res.returncode == 2
    assert expected in res.stderr
    assert "Traceback" not in res.stderr


def test_help_lists_groups_without_importing_torch() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from mooncake_cli.main import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'grpc', 'sqlalchemy', 'fastapi', 'textual', 'numpy') if m in sys.modules]\n"
        "print(r.output)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("HEAVY="), res.stdout[-300:]
    import typer.main

    from mooncake_cli.main import app

    group = typer.main.get_group(app)
    for name in group.commands:
        assert name in res.stdout
