"""``mooncake web``: ``--print-token``, input errors, a port in use, serve and stop."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
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


def test_a_port_in_use_is_one_line_naming_the_address(tmp_path: Path) -> None:
    # The dashboard binds before uvicorn starts: a taken port is a start failure whose
    # message names the address (was uvicorn's own log line and exit from inside it).
    cfg = _config(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "mooncake_cli", "web", "-c", str(cfg), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_serves_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    # `mooncake web` runs on the serve scaffold: the ready line once it listens, one
    # SIGTERM stops it through the component's stop (uvicorn's own capture is off).
    cfg = _config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mooncake_cli", "web", "-c", str(cfg), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.fullmatch(r"dashboard on http://127\.0\.0\.1:(\d+)/ \(API docs at /docs\)\n", line)
        assert m, line
        health = httpx.get(f"http://127.0.0.1:{m.group(1)}/health", timeout=10)
        assert health.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "mooncake web: stopping" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
