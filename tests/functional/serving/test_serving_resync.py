"""A restarted conductor learns what the Store already holds from the master's listing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving_cluster import Cluster, run_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

PREFIX = "Blocks stored before the conductor restarted are still in the Store. " * 2


def _dram_blocks(cl: Cluster) -> int:
    blocks = httpx.get(cl.url + "/health").json()["scheduler"]["index_blocks"]
    return sum(n for holder, n in blocks.items() if holder.endswith("/dram"))


def _restart_conductor(cl: Cluster, tmp: Path) -> None:
    old = cl.procs["conductor"]
    old.send_signal(signal.SIGTERM)
    old.wait(timeout=30)
    log = open(tmp / "logs" / "conductor.again.log", "wb")  # noqa: SIM115
    cl.procs["conductor"] = subprocess.Popen(
        [
            *(sys.executable, "-m", "mooncake_cli", "conductor", "serve"),
            "--config",
            str(cl.config_path),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"),
    )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        assert cl.procs["conductor"].poll() is None, cl.log("conductor.again")
        try:
            if httpx.get(cl.url + "/health", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("restarted conductor never became healthy")


def _matched_blocks(cl: Cluster, rid: str) -> Any:
    """Prefix blocks the chosen prefill instance holds or fetches (a store hit)."""
    db = Path(cl.config["state_dir"]) / "audit.db"
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with sqlite3.connect(db) as con:
            row = con.execute(
                "select c.matched_prefix_blocks + c.transfer_blocks from candidates c "
                "join decisions d on c.decision_id = d.id "
                "where d.request_id = ? and c.role = 'prefill' and c.chosen",
                (rid,),
            ).fetchone()
        if row is not None and row[0] is not None:
            return row[0]
        time.sleep(0.2)
    raise AssertionError(f"no audit row for {rid}")


def test_serving_restarted_conductor_resyncs_store_blocks(tmp_path: Path) -> None:
    with run_cluster(tmp_path, prefill=1, decode=1) as cl:
        r = httpx.post(
            cl.url + "/v1/completions",
            json={"prompt": PREFIX + "first?", "max_tokens": 2},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        end = time.monotonic() + 10
        while _dram_blocks(cl) < 8 and time.monotonic() < end:
            time.sleep(0.2)
        stored = _dram_blocks(cl)
        assert stored >= 8  # 141 prompt tokens, 16-token blocks

        _restart_conductor(cl, tmp_path)
        # No event replays these blocks: only the start-up listing can know them.
        health = httpx.get(cl.url + "/health").json()
        assert _dram_blocks(cl) == stored
        assert health["scheduler"]["index_drift"]["added"] >= stored
        assert health["store_resync"]["runs"] >= 1
        assert health["store_resync"]["last_blocks"] == stored
        tele = httpx.get(cl.url + "/telemetry").json()
        assert "drift_added" in str(tele)

        r = httpx.post(
            cl.url + "/v1/completions",
            json={"prompt": PREFIX + "second?", "max_tokens": 2},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        # Scheduled with a store hit at once (kvcache_centric may fetch only part of the
        # prefix when recomputing the rest is predicted cheaper; without resync it is 0).
        assert _matched_blocks(cl, r.json()["id"]) > 0

        # The prefill worker's own cache (tier hbm) is resynced too (ListCachedBlocks).
        end = time.monotonic() + 10
        hbm = 0
        while time.monotonic() < end:
            health = httpx.get(cl.url + "/health").json()
            hbm = health["scheduler"]["index_blocks"].get("prefill-0/hbm", 0)
            if hbm >= stored and health["store_resync"]["worker_runs"] >= 1:
                break
            time.sleep(0.2)
        assert hbm >= stored
        assert health["store_resync"]["worker_errors"] == 0
