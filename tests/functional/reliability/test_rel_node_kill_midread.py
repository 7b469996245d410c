"""SIGKILL a store node while clients are reading a two-replica object."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_client_procs import Cluster, make_client, start_cluster

from mooncake_core.store import ReplicateConfig
from mooncake_core.store.errors import StoreError

pytestmark = pytest.mark.integration

SIZE = 24 << 20  # spans two 16 MiB slices: reads take long enough to be cut mid-way


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(tmp_path)
    yield c
    c.close()


def test_rel_node_killed_mid_read_falls_back_to_other_replica(own_cluster: Cluster) -> None:
    value = bytes(range(256)) * (SIZE // 256)
    digest = hashlib.sha256(value).hexdigest()
    with make_client(own_cluster, transport="tcp") as w:
        w.put("midread", value, ReplicateConfig(replica_num=2))
        segs = {s.segment for r in w.stat("midread").replicas for s in r}
    assert segs == {"n0", "n1"}, segs

    stop = threading.Event()
    results: list[tuple[float, str]] = []  # (time, "ok" | "bad" | error text)

    def reader() -> None:
        with make_client(own_cluster, transport="tcp") as cl:
            while not stop.is_set():
                try:
                    got = cl.get("midread")
                    ok = hashlib.sha256(got).hexdigest() == digest
                    results.append((time.monotonic(), "ok" if ok else "bad"))
                except StoreError as e:  # a clean, typed error is allowed only around the kill
                    results.append((time.monotonic(), f"{type(e).__name__}: {e}"))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:  # the readers stop whatever happens here (they are not daemons)
        deadline = time.monotonic() + 30
        while len(results) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = own_cluster.nodes["n0"].proc
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        time.sleep(3.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)

    assert not [r for r in results if r[1] == "bad"], "a read returned other bytes"
    after = [r for t, r in results if t > killed_at + 0.5]
    assert len(after) >= 3, f"readers stalled after the kill: {results[-5:]}"
    # Once the kill is seen, every read succeeds from n1; at most the reads in flight
    # at the kill (one per reader) may fail, and with a typed error.
    failed = [r for r in results if r[1] != "ok"]
    assert len(failed) <= len(threads), failed
    assert all(r == "ok" for r in after), after[:5]
    print(f"reads {len(results)}, after kill {len(after)}, failed {failed}")
