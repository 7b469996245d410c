"""SIGKILL a store node under single-replica put load: it leaves placement fast, and a
put whose replica target died is placed again elsewhere instead of failing."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import kill9
from store_client_procs import TEST_MASTER, Cluster, make_client, start_cluster

from mooncake_core.store.errors import StoreError

pytestmark = pytest.mark.integration

HB = float(TEST_MASTER["heartbeat_interval_s"])  # 0.5 s
TTL = float(TEST_MASTER["client_ttl_s"])  # 2 s
WRITERS = 4
SIZE = 16 << 10
MAX_RATE = 500
"""Puts per second per writer at most: the load stays within the nodes' memory."""


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[Cluster]:
    # 256 MiB each: the whole load (at most WRITERS x MAX_RATE puts/s of SIZE bytes for
    # about 8 s, 256 MiB) fits on the two survivors, so nothing is evicted and a key that
    # is missing at the end was lost, not evicted (checked below).
    c = start_cluster(tmp_path, nodes=("n0", "n1", "n2"), node_size="256MiB")
    yield c
    c.close()


def _segments(c: Cluster) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in c.snapshot()["segments"]}


@pytest.mark.parametrize("transport", ["tcp", "auto"])
def test_rel_killed_node_leaves_placement_fast_and_puts_do_not_fail(
    three_nodes: Cluster, transport: str
) -> None:
    # tcp: writing to the dead node is refused at once. auto (shm on this host): the
    # copy into the dead node's still-mapped file succeeds; the client checks that the
    # owner still runs and treats the write as failed when it does not.
    c = three_nodes
    stop = threading.Event()
    lock = threading.Lock()
    done: list[tuple[float, float, str, str]] = []  # (started, finished, key, sha256)
    failed: list[tuple[float, str]] = []  # (failed at, error)

    def writer(w: int) -> None:
        with make_client(c, transport=transport) as cl:
            i = 0
            t0 = time.monotonic()
            while not stop.is_set():
                ahead = t0 + i / MAX_RATE - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                key = f"w{w}-{i}"
                value = (key.encode() * (SIZE // len(key) + 1))[:SIZE]
                started = time.monotonic()
                try:
                    cl.put(key, value)
                    with lock:
                        sha = hashlib.sha256(value).hexdigest()
                        done.append((started, time.monotonic(), key, sha))
                except StoreError as e:
                    with lock:
                        failed.append((time.monotonic(), f"{type(e).__name__}: {e}"))
                i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(3.0)
        killed_at = time.monotonic()
        kill9(c.nodes["n1"].proc)
        dead_at = time.monotonic()  # reaped: surely dead from here on
        # Excluded: gone from the table, or still listed but marked suspect.
        excluded_at = None
        while time.monotonic() - killed_at < TTL + 10:
            n1 = _segments(c).get("n1")
            if n1 is None or n1.get("suspect"):
                excluded_at = time.monotonic()
                break
            time.sleep(0.02)
        time.sleep(max(0.0, killed_at + TTL + 3.0 - time.monotonic()))
    finally:
        stop.set()
        for t in threads:
            t.join(60)

    assert excluded_at is not None, "n1 never left placement"
    exclusion = excluded_at - killed_at
    after_kill = [f for f in failed if f[0] >= killed_at]
    after_exclusion = [f for f in failed if f[0] >= excluded_at]
    puts_after = sum(1 for d in done if d[1] >= killed_at)
    print(
        f"[{transport}] exclusion {exclusion:.3f} s after SIGKILL (heartbeat {HB} s, client_ttl_s {TTL} s); "
        f"puts ok before kill {len(done) - puts_after}, after {puts_after}; failed puts "
        f"{len(after_kill)} after the kill, {len(after_exclusion)} after exclusion"
    )
    assert len(done) - puts_after > 50, "the load did not run"
    assert puts_after > 50, "no put succeeded after the kill"
    assert after_exclusion == [], after_exclusion[:5]
    assert after_kill == [], after_kill[:5]
    assert failed == [], failed[:5]
    assert exclusion < 3 * HB, f"excluded only after {exclusion:.2f} s"

    # After n1 expired: its objects written before the kill are gone with it; every
    # put started once n1 was dead is there, byte-exact. (A missing key could also be
    # an eviction, which is no loss: the load is sized so that none happens.)
    evicted = c.snapshot()["evicted_objects_total"]
    assert evicted == 0, f"{evicted} objects evicted: the load outgrew the nodes"
    lost = []
    with make_client(c, transport="tcp") as cl:
        for started, _, key, digest in done:
            try:
                got = cl.get(key)
            except StoreError:
                if started >= dead_at:
                    lost.append(f"{key} (started {started - dead_at:.3f} s after the kill)")
                continue
            assert hashlib.sha256(got).hexdigest() == digest, key
    assert lost == [], lost[:5]


def test_rel_silent_node_leaves_placement_within_a_heartbeat(tmp_path: Path) -> None:
    # No writer reports it: only the missed heartbeats tell the master.
    c = start_cluster(tmp_path)
    try:
        assert not _segments(c)["n1"]["suspect"]
        killed_at = time.monotonic()
        kill9(c.nodes["n1"].proc)
        while not _segments(c)["n1"]["suspect"]:
            assert time.monotonic() - killed_at < TTL, "n1 expired before it was suspect"
            time.sleep(0.01)
        exclusion = time.monotonic() - killed_at
        with make_client(c, transport="tcp") as cl:
            for i in range(20):  # new single-replica puts all go to n0 now
                cl.put(f"after-{i}", b"x" * 4096)
                assert cl.stat(f"after-{i}").replicas[0][0].segment == "n0"
        gone_at = None
        while gone_at is None and time.monotonic() - killed_at < TTL + 10:
            if "n1" not in _segments(c):
                gone_at = time.monotonic() - killed_at
            time.sleep(0.02)
        print(
            f"silent node suspect {exclusion:.3f} s after SIGKILL (heartbeat {HB} s), "
            f"expired after {gone_at} s (client_ttl_s {TTL} s)"
        )
        assert exclusion < 3 * HB
        assert gone_at is not None and gone_at >= TTL - HB - 0.2
    finally:
        c.close()


def test_rel_batch_put_items_on_a_dead_node_are_placed_again(tmp_path: Path) -> None:
    c = start_cluster(tmp_path)
    try:
        with make_client(c, transport="tcp") as cl:
            cl.put_batch([f"warm-{i}" for i in range(8)], [b"w" * 4096] * 8)  # opens n0, n1
            kill9(c.nodes["n1"].proc)
            # At once: n1 has not missed a heartbeat yet, so about half the items are
            # placed on it and fail; each is revoked and placed again on n0.
            keys = [f"b-{i}" for i in range(40)]
            values = [k.encode() * 1024 for k in keys]
            res = cl.put_batch(keys, values)
            assert res == [None] * len(keys), [r for r in res if r is not None][:3]
            for k, v in zip(keys, values, strict=True):
                assert cl.get(k) == v
                assert cl.stat(k).replicas[0][0].segment == "n0"
    finally:
        c.close()
