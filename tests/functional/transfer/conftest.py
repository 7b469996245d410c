"""Fixtures for the Transfer Engine functional tests: real target processes on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import TransferEngine

_SCRIPT = Path(__file__).with_name("transfer_target_proc.py")


class Target:
    """A running transfer_target_proc.py."""

    def __init__(self, proc: subprocess.Popen[str], segment_name: str, seg: str) -> None:
        self.proc = proc
        self.segment_name = segment_name
        self.name = f"{segment_name}/{seg}"

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def sha256(self, offset: int, length: int) -> str:
        return self.ask(f"sha256 {offset} {length}")

    def snapshot(self) -> dict[str, Any]:
        return json.loads(self.ask("snapshot"))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def start_target() -> Iterator[Callable[..., Target]]:
    """Factory: ``start_target(size=..., nics=[...], shm=False, secret=None, ...)``."""
    procs: list[subprocess.Popen[str]] = []

    def start(
        *,
        size: int = 1 << 20,
        nics: tuple[str, ...] = ("127.0.0.1",),
        shm: bool = False,
        secret: bytes | None = None,
        host_id: str | None = None,
        name: str = "store-0",
        config: dict[str, Any] | None = None,
        port: int = 0,
    ) -> Target:
        cmd = [sys.executable, str(_SCRIPT), "--nics", ",".join(nics), "--size", str(size)]
        cmd += ["--name", name, "--config", json.dumps(config or {}), "--port", str(port)]
        if shm:
            cmd.append("--shm")
        if secret is not None:
            cmd += ["--secret", secret.hex()]
        if host_id is not None:
            cmd += ["--host-id", host_id]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"target failed to start: {cmd}")
        return Target(proc, json.loads(line)["segment_name"], name)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def make_engine() -> Iterator[Callable[..., TransferEngine]]:
    """Factory for started initiator engines, closed after the test."""
    engines: list[TransferEngine] = []

    def make(nics: tuple[str, ...] = ("127.0.0.1",), **kw: Any) -> TransferEngine:
        cfg_fields = kw.pop("config", {})
        eng = TransferEngine(TransferConfig(**cfg_fields), nics=nics, **kw).start()
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        eng.close()
