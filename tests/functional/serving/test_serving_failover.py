"""A prefill worker dies: the conductor stops scheduling on it and serving goes on; when a
worker with that name comes back it is scheduled on again."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving_cluster import Cluster, run_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]


def _wait_worker(cl: Cluster, name: str, up: bool, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if httpx.get(cl.url + "/health").json()["workers"][name]["up"] is up:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never became {'up' if up else 'down'}")


def _complete(cl: Cluster, i: int) -> Any:
    body = {"prompt": f"request number {i} after the failure", "max_tokens": 3}
    return httpx.post(cl.url + "/v1/completions", json=body, timeout=60)


def test_serving_survives_a_dead_prefill_worker(tmp_path: Path) -> None:
    with run_cluster(tmp_path, with_store=False, prefill=2, decode=1) as cl:
        victim = cl.procs["prefill-0"]
        victim.kill()
        victim.wait()
        _wait_worker(cl, "prefill-0", up=False)
        sched = httpx.get(cl.url + "/health").json()["scheduler"]
        assert sched["prefill_instances"] == ["prefill-1"]
        for i in range(6):
            r = _complete(cl, i)
            assert r.status_code == 200, r.text
            assert r.json()["timing"]["prefill"] == "prefill-1"
        # Same name, same ports: the conductor schedules on it again.
        log = open(tmp_path / "logs" / "prefill-0.again.log", "wb")  # noqa: SIM115
        cl.procs["prefill-0"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mooncake_cli",
                "worker",
                "prefill",
                "--name",
                "prefill-0",
                "--no-store",
                "--config",
                str(cl.config_path),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
        _wait_worker(cl, "prefill-0", up=True, timeout=60)
        sched = httpx.get(cl.url + "/health").json()["scheduler"]
        assert sched["in_flight"] == 0
        assert sched["prefill_instances"] == ["prefill-1", "prefill-0"]  # re-added last
        r = _complete(cl, 100)
        assert r.status_code == 200, r.text
