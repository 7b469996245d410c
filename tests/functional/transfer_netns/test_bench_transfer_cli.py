"""`mooncake bench transfer` as an operator runs it: a target process and initiator runs
against it on loopback (no namespaces needed)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

pytestmark = [pytest.mark.integration]

BENCH = [sys.executable, "-m", "mooncake_cli", "bench", "transfer"]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [*BENCH, "--mode", "target", "--buffer-size", "8MiB", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else "target exited"
    hello = json.loads(line)
    assert hello["buffer_size"] == 8 << 20
    yield proc, hello["segment"]
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("protocol", "operation"), [("tcp", "read"), ("tcp", "write"), ("shm", "read")]
)
def test_bench_transfer_initiator_reports_rates(target, protocol: str, operation: str) -> None:
    _, segment = target
    res = _bench(
        "--protocol", protocol, "--segment", segment, "--operation", operation,
        "--block-size", "64KiB", "--batch-size", "16", "--duration", "0.3",
        "--buffer-size", "8MiB", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["protocol"] == protocol and out["operation"] == operation
    assert out["verified"] is True
    assert out["batches"] >= 1
    assert out["bytes"] == out["batches"] * 16 * 65536
    assert out["gbps"] > 0 and out["iops"] > 0
    if protocol == "tcp":
        moved = sum(n["bytes_received"] + n["bytes_sent"] for n in out["nics"].values())
        assert moved >= out["bytes"]


def test_bench_transfer_prints_a_table_without_json(target) -> None:
    _, segment = target
    res = _bench(
        "--segment", segment, "--duration", "0.2", "--batch-size", "16", "--buffer-size", "8MiB"
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "GB/s" in res.stdout and "IOPS" in res.stdout and "yes" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--segment host:port/name is required"),
        (
            ("--segment", "127.0.0.1:1/x", "--block-size", "lots"),
            "--block-size must be a byte size",
        ),
        (
            ("--segment", "127.0.0.1:1/x", "--block-size", "1MiB", "--buffer-size", "4MiB"),
            "smaller than block*batch*threads",
        ),
    ],
)
def test_bench_transfer_rejects_bad_arguments(args: tuple[str, ...], message: str) -> None:
    res = _bench(*args)
    assert res.returncode != 0
    assert message in res.stderr.replace("\n", " ")


def test_bench_transfer_unreachable_segment_fails_cleanly() -> None:
    res = _bench("--segment", "127.0.0.1:1/bench", "--duration", "0.2", "--buffer-size", "8MiB")
    assert res.returncode != 0
    assert "127.0.0.1:1" in res.stderr
    assert "Traceback" not in res.stderr


def test_bench_transfer_target_stops_on_sigterm(target) -> None:
    proc, _ = target
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
