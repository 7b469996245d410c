"""Helpers for the cluster tests: a config on free ports, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from mooncake_core.config import ClusterConfig, ModelConfig


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``address``."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def make_config(
    tmp_path: Path,
    *,
    address: str = "127.0.0.1",
    workers: bool = False,
    real_model: bool = False,
    name: str = "mooncake.yaml",
    **top: Any,
) -> tuple[Path, dict[str, Any]]:
    """Write the default config with every port free, a temp state_dir and small segments.

    The workers run the tiny random model unless ``real_model`` keeps the embedded
    default's (SmolLM2-135M-Instruct).

    Returns:
        The file and the dict written (tests edit and rewrite it).
    """
    cfg: dict[str, Any] = ClusterConfig().model_dump(mode="json", exclude_none=True)
    if not real_model:
        cfg["model"] = ModelConfig().model_dump(mode="json", exclude_none=True)
    cfg["state_dir"] = str(tmp_path / "state")
    cfg["hosts"] = [{"name": "local", "address": address}]
    # Free on loopback here; a fresh namespace has every port free anyway.
    ports = _unique_ports("127.0.0.1", 18)
    cfg["master"]["port"], cfg["master"]["metrics_port"] = ports.pop(), ports.pop()
    cfg["master"]["fast_port"] = ports.pop()
    for node in cfg["store_nodes"]:
        node["data_port"], node["metrics_port"] = ports.pop(), ports.pop()
        node["segment_size"] = 16 << 20
    cfg["conductor"]["http_port"] = ports.pop()
    for role in ("prefill_workers", "decode_workers"):
        if workers:
            for w in cfg[role]:
                w["rpc_port"], w["data_port"] = ports.pop(), ports.pop()
                w["metrics_port"] = ports.pop()
        else:
            cfg[role] = []
    cfg["dashboard"]["port"] = ports.pop()
    cfg.update(top)
    path = tmp_path / name
    write_config(path, cfg)
    return path, cfg


def write_config(path: Path, cfg: dict[str, Any]) -> None:
    """Write ``cfg`` as YAML to ``path``."""
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


_HANDED_OUT: set[int] = set()


def free_block(n: int, address: str = "127.0.0.1") -> int:
    """A base port with ``base .. base + n - 1`` free now and none handed out before
    by this process (HA masters take ``master.port + i``); all ``n`` are handed out."""
    from mooncake_core.cluster import port_in_use

    while True:
        base = free_port(address)
        block = range(base, base + n)
        if base + n < 65535 and not any(p in _HANDED_OUT or port_in_use(address, p) for p in block):
            _HANDED_OUT.update(block)
            return base


def _unique_ports(address: str, n: int) -> list[int]:
    """``n`` free ports, none handed out before by this process: a port is free only
    until someone binds it, so a second call (a worker added to a config that
    ``make_config`` filled) could otherwise get a port the first call gave out."""
    ports: set[int] = set()
    while len(ports) < n:
        port = free_port(address)
        if port not in _HANDED_OUT:
            ports.add(port)
            _HANDED_OUT.add(port)
    return sorted(ports)


def cli(
    *args: str, timeout: float = 120, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``mooncake ARGS`` (optionally behind ``prefix``, e.g. ``ip netns exec NS``)."""
    env = {**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "mooncake_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def replay(c: str, trace: Path, limit: int, *, concurrency: int, max_output: int) -> dict[str, Any]:
    """``cluster up --detach`` with config ``c``, then ``mooncake loadgen`` of ``trace``;
    returns loadgen's JSON report (the caller takes the cluster down)."""
    up = cli("cluster", "up", "-c", c, "--detach", "--ready-timeout", "120", timeout=180)
    assert up.returncode == 0, up.stderr[-3000:]
    load = cli(
        "loadgen", "-c", c, "--trace", str(trace), "--limit", str(limit),
        "--max-output", str(max_output), "--concurrency", str(concurrency), "--json",
        timeout=150,
    )  # fmt: skip
    assert load.returncode == 0, load.stderr[-3000:]
    return dict(json.loads(load.stdout))


def audit_rows(c: str) -> list[dict[str, Any]]:
    """Every decision of the cluster's audit (``mooncake audit export``), oldest first."""
    ex = cli("audit", "export", "-c", c, "--format", "jsonl")
    assert ex.returncode == 0, ex.stderr
    return sorted((json.loads(line) for line in ex.stdout.splitlines()), key=lambda r: r["id"])


def missing_commands(*paths: tuple[str, ...]) -> list[str]:
    """The ``mooncake`` sub-commands among ``paths`` this build lacks (for skip marks)."""
    return [" ".join(p) for p in paths if not has_command(*p)]


def has_command(*path: str) -> bool:
    """Whether this installation has ``mooncake PATH...``."""
    from mooncake_cli.cluster_cmd import available_commands

    return tuple(path) in available_commands()


def pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def group_gone(pgid: int) -> bool:
    """True when no live process is left in process group ``pgid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


def end_foreground(proc: subprocess.Popen[Any], config: Path, state_dir: Path) -> None:
    """Teardown of a test that ran ``cluster up`` in the foreground: kill the watcher
    if it still runs, then ``cluster down`` and :func:`kill_recorded`."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    cli("cluster", "down", "-c", str(config))
    kill_recorded(state_dir)


def kill_recorded(state_dir: Path) -> None:
    """Teardown safety net: SIGKILL every process group recorded under ``state_dir``."""
    import json

    for rec in (state_dir / "run").glob("*.json"):
        try:
            pgid = int(json.loads(rec.read_text())["pgid"])
        except (OSError, ValueError, KeyError):
            continue
        try:
            if not group_gone(pgid):
                os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(0.1)
