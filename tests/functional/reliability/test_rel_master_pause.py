"""The master's own stalls and clock jumps never expire healthy store nodes.

A SIGSTOPped master (a long GC, VM steal, a CPU stall) sees, when it resumes, every
node silent for the whole pause; a master whose clocks jump forward sees the same.
Neither is evidence that a node died: only silence measured while the master ran is.
A node that really died (SIGKILL) is still expired after ``client_ttl_s``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import yaml
from faults import FakeClock, kill9, pause_for
from store_client_procs import (
    MASTER_READY,
    TEST_MASTER,
    Cluster,
    Proc,
    free_port,
    make_client,
    spawn,
    start_cluster,
)

from mooncake_core.store.client import Client
from mooncake_core.store.errors import UnavailableError

pytestmark = pytest.mark.integration

TTL = float(TEST_MASTER["client_ttl_s"])  # 2 s
HB = float(TEST_MASTER["heartbeat_interval_s"])  # 0.5 s
N_OBJECTS = 200
SIZE = 4096


def _snapshot(c: Cluster) -> dict[str, Any]:
    port = int(c.master.match.group(3))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot", timeout=10) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


def _segments(c: Cluster) -> list[str]:
    return sorted(s["name"] for s in _snapshot(c)["segments"])


def _fill(cl: Client) -> dict[str, str]:
    rng = np.random.default_rng(7)
    digests = {}
    for i in range(N_OBJECTS):
        value = rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes()
        cl.put(f"obj-{i}", value)
        digests[f"obj-{i}"] = hashlib.sha256(value).hexdigest()
    return digests


def _check_all(cl: Client, digests: dict[str, str]) -> list[str]:
    """Keys that are missing or read back wrong."""
    bad = []
    for key, digest in digests.items():
        try:
            ok = hashlib.sha256(cl.get(key)).hexdigest() == digest
        except Exception as e:  # a missing object is the failure under test
            bad.append(f"{key}: {type(e).__name__}: {e}")
            continue
        if not ok:
            bad.append(f"{key}: wrong bytes")
    return bad


def _wait_gone(c: Cluster, name: str, timeout: float) -> float:
    """Seconds until segment ``name`` leaves the master's table."""
    start = time.monotonic()
    while name in _segments(c):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"segment {name} still mounted {timeout} s after its node died")
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(tmp_path)
    yield c
    c.close()


def _spawn_master(cfg: Path, port: int, env: dict[str, str], extra: list[str]) -> Proc:
    with mock.patch.dict(os.environ, env):
        return spawn(
            ["master", "--config", str(cfg), "--port", str(port), "--metrics-port", "0", *extra],
            MASTER_READY,
        )


def _start_cluster_with(
    tmp: Path, env: dict[str, str] | None = None, extra: list[str] | None = None
) -> Cluster:
    """start_cluster, with the master given extra environment and flags."""
    cfg = tmp / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp), "master": TEST_MASTER}))
    port = free_port()
    master = _spawn_master(cfg, port, env or {}, extra or [])
    c = Cluster(cfg, master, f"127.0.0.1:{port}", {})
    try:
        for n in ("n0", "n1"):
            c.start_node(n)
    except BaseException:
        c.close()
        raise
    return c


def test_rel_master_paused_twice_client_ttl_loses_nothing(own_cluster: Cluster) -> None:
    c = own_cluster
    with make_client(c, transport="tcp") as cl:
        digests = _fill(cl)
        before = _snapshot(c)
        assert before["lost_objects_total"] == 0
        assert len(before["segments"]) == 2

        pause_for(c.master.proc, 2 * TTL)
        time.sleep(3 * TTL)  # a few TTLs of the master running again

        after = _snapshot(c)
        assert _segments(c) == ["n0", "n1"], after["segments"]
        assert after["lost_objects_total"] == 0, after
        assert after["key_count"] == N_OBJECTS
        assert _check_all(cl, digests) == []

        # A node that really dies is still expired after the TTL (plus upkeep slack).
        kill9(c.nodes["n1"].proc)
        took = _wait_gone(c, "n1", TTL + 10)
        print(f"killed node expired after {took:.2f} s (client_ttl_s {TTL})")
        assert took >= TTL - HB - 0.2  # its last heartbeat came up to HB before the kill


@pytest.mark.parametrize("clocks", ["wall+monotonic", "wall"])
def test_rel_master_clock_jumps_keep_healthy_nodes(tmp_path: Path, clocks: str) -> None:
    # Forward jumps of both clocks (a resumed VM), and of the wall clock alone, forward
    # and back (NTP steps). The monotonic clock never steps back on Linux (asyncio's own
    # timers would stall if it did), so only the wall clock is stepped back.
    with FakeClock() as clock:
        env = clock.env()
        if clocks == "wall":
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        c = _start_cluster_with(tmp_path, env=env)
        try:
            with make_client(c, transport="tcp") as cl:
                digests = _fill(cl)
                clock.jump(60.0)
                time.sleep(3 * TTL)
                clock.jump(3600.0)
                time.sleep(3 * TTL)
                if clocks == "wall":
                    clock.jump(-7200.0)
                    time.sleep(3 * TTL)
                after = _snapshot(c)
                assert _segments(c) == ["n0", "n1"], after["segments"]
                assert after["lost_objects_total"] == 0, after
                assert _check_all(cl, digests) == []

                kill9(c.nodes["n0"].proc)
                took = _wait_gone(c, "n0", TTL + 10)
                print(f"[{clocks}] killed node expired after {took:.2f} s (client_ttl_s {TTL})")
        finally:
            c.close()


def _get_retrying(cl: Client, key: str, timeout: float = 15.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cl.get(key)
        except UnavailableError:  # the restarted master is not reachable yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_rel_journaled_master_paused_15s_then_down_20s_loses_nothing(tmp_path: Path) -> None:
    # The measurement: 15 s (7.5x client_ttl_s), with the journal. Then SIGKILL,
    # 20 s down, restart from the journal: nothing the pause did is replayed, and the
    # nodes (their channels in reconnect backoff all that time) are not expired before
    # they find the new process (before: both nodes and all 200 objects gone).
    flags = ["--data-dir", str(tmp_path / "journal")]
    c = _start_cluster_with(tmp_path, extra=flags)
    try:
        with make_client(c, transport="tcp") as cl:
            digests = _fill(cl)
            pause_for(c.master.proc, 15.0)
            time.sleep(3 * TTL)
            after = _snapshot(c)
            assert _segments(c) == ["n0", "n1"], after["segments"]
            assert after["lost_objects_total"] == 0, after
            assert _check_all(cl, digests) == []

            kill9(c.master.proc)
            time.sleep(20.0)  # down (a crash, then a slow restart)
            port = int(c.address.rpartition(":")[2])
            c.master = _spawn_master(c.config, port, {}, flags)
            for key, digest in digests.items():
                assert hashlib.sha256(_get_retrying(cl, key)).hexdigest() == digest, key
            time.sleep(3 * TTL)  # the nodes heartbeat (or re-mount on) the new master
            assert _segments(c) == ["n0", "n1"]
            assert _check_all(cl, digests) == []
    finally:
        c.close()
