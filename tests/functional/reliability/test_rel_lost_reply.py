"""A heartbeat reply lost on the way back never leaves a node's segment unmounted.

The master expired a node during a partition. When the link comes back, the first
heartbeat reaches the master, which registers the client again and answers "I did not
know you": the only signal to remount. If that one reply is late (the client's
deadline passed), every later beat is answered "known" and the node's memory stays out
of the store for good, although the node runs and beats. Found by
``test_rel_partition.py`` failing once in CI (``clients: 1, segments: []``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from faults import CutProxy
from store_client_procs import TEST_MASTER, start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TTL = float(TEST_MASTER["client_ttl_s"])  # 2 s
HB = float(TEST_MASTER["heartbeat_interval_s"])  # 0.5 s: each beat's deadline is 1 s


def _segments(snap: dict[str, object]) -> list[str]:
    return sorted(s["name"] for s in snap["segments"])  # type: ignore[attr-defined,index]


def _until(cond, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def test_rel_node_remounts_when_the_forgotten_reply_is_lost(tmp_path: Path) -> None:
    c = start_cluster(tmp_path, nodes=())
    port = int(c.address.rsplit(":", 1)[1])
    try:
        with CutProxy(port) as link:
            node = c.start_node("n0", "16MiB", master=f"127.0.0.1:{link.port}")
            assert _until(lambda: _segments(c.snapshot()) == ["n0"], 10)

            link.cut()  # silence both ways: the master expires n0
            assert _until(lambda: _segments(c.snapshot()) == [], TTL + 10)
            # Requests get through again, replies do not: the next beat registers the
            # client at the master; its "unknown" reply misses the client's deadline.
            link.cut(replies_only=True)
            assert _until(lambda: c.snapshot()["client_count"] == 1, 10), c.snapshot()
            time.sleep(2 * HB + 0.5)  # past the deadline of the beat that carried it
            link.heal()

            remounted = _until(lambda: _segments(c.snapshot()) == ["n0"], 10)
            assert remounted, (c.snapshot(), "".join(node.log)[-2000:])
            time.sleep(2 * HB)
            snap = c.snapshot()
            assert _segments(snap) == ["n0"] and snap["client_count"] == 1, snap
    finally:
        c.close()
