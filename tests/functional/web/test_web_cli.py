"""``mooncake web --print-token`` and the command's input errors (no server started)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from mooncake_cli.main import app
from mooncake_core.store.auth import control_token


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path)}))
    return cfg


def test_print_token_from_the_secret(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    (tmp_path / "secret").write_bytes(b"abc123\n")
    res = CliRunner().invoke(app, ["web", "--config", str(cfg), "--print-token"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == control_token(b"abc123")


def test_print_token_without_secret(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    res = CliRunner().invoke(app, ["web", "--config", str(cfg), "--print-token"])
    assert res.exit_code == 1
    assert f"no cluster secret at {tmp_path / 'secret'}" in res.output


def test_bad_target_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    res = CliRunner().invoke(app, ["web", "--config", str(cfg), "--target", "nourl"])
    assert res.exit_code == 2
    assert "'nourl' is not NAME=URL" in res.output
