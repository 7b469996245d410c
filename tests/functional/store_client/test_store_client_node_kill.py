"""SIGKILL a store node: surviving replicas stay readable, lost objects are never garbage."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from store_client_procs import TEST_MASTER, Cluster, make_client, remove_shm_of, start_cluster

from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client import Client
from mooncake_core.store.errors import NotFoundError, UnavailableError
from mooncake_core.transfer import OpCode

pytestmark = pytest.mark.integration


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(tmp_path)
    yield c
    c.close()


def _blob(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _wait_until_missing(c: Client, key: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while c.is_exist(key):
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} still listed {timeout}s after its node died")
        time.sleep(0.2)


def test_kill_node_surviving_replicas_read_lost_ones_not_found(own_cluster: Cluster) -> None:
    # tcp: a dead node is noticed at once (connection refused). auto: shm reads of a
    # killed node's still-mapped file return its last (correct) bytes until the
    # master expires the node; never anything else.
    tcp = make_client(own_cluster, transport="tcp")
    shm = make_client(own_cluster)
    both, only1, only0 = _blob(1 << 20, 1), _blob(256 << 10, 2), _blob(4096, 3)
    tcp.put("both", both, ReplicateConfig(replica_num=2))
    tcp.put("only-n1", only1, ReplicateConfig(preferred_segments=("n1",)))
    tcp.put("only-n0", only0, ReplicateConfig(preferred_segments=("n0",)))
    assert tcp.stat("only-n1").replicas[0][0].segment == "n1"
    assert shm.get("only-n1") == only1  # shm client maps n1's file now
    assert shm.transport_of("n1") == "shm"

    victim = own_cluster.nodes["n1"].proc
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    # Its /dev/shm file stays (as after any SIGKILL) and stays mapped by `shm`.

    # Before the master notices: the surviving replica serves reads.
    assert tcp.get("both") == both
    assert tcp.get("only-n0") == only0
    with pytest.raises((UnavailableError, NotFoundError)):
        tcp.get("only-n1")
    got = None
    with contextlib.suppress(UnavailableError, NotFoundError):
        got = shm.get("only-n1")
    assert got in (None, only1)  # never garbage
    # A write whose replica lands on the dead node is revoked there, not left
    # half-written, and placed again on a live node.
    tcp.put("to-dead", b"x" * 4096, ReplicateConfig(preferred_segments=("n1",)))
    assert tcp.get("to-dead") == b"x" * 4096
    assert tcp.stat("to-dead").replicas[0][0].segment == "n0"

    # After client_ttl_s the master drops n1: lost objects are NOT_FOUND everywhere.
    _wait_until_missing(tcp, "only-n1", TEST_MASTER["client_ttl_s"] + 10)
    for c in (tcp, shm):
        with pytest.raises(NotFoundError):
            c.get("only-n1")
        assert c.get("both") == both
    assert [r[0].segment for r in tcp.stat("both").replicas] == ["n0"]

    # n1 comes back (a new process, a new shm file): the shm client must drop its
    # handle on the dead file, or its writes would vanish and readers see zeros.
    own_cluster.start_node("n1")
    fresh = _blob(512 << 10, 4)
    shm.put("again", fresh, ReplicateConfig(preferred_segments=("n1",)))
    assert tcp.get("again") == fresh  # tcp reads the new process's memory
    assert shm.get("again") == fresh
    tcp.close()
    shm.close()
    remove_shm_of(victim.pid)


def test_batch_copies_made_in_the_client_keep_every_check(own_cluster: Cluster) -> None:
    # Batches of one-slice objects on same-host segments are copied by the client itself
    # (DataPath.start_flat: no request or batch per item). Exactly what it moves, what
    # it refuses (nothing copied) and what it reports for a node that has exited.
    c = make_client(own_cluster)
    n = 16
    buf = np.zeros(2 * n * 4096, dtype=np.uint8)
    src, dst = buf[: n * 4096], buf[n * 4096 :]
    src[:] = np.frombuffer(_blob(n * 4096, 7), dtype=np.uint8)
    base = buf.ctypes.data
    c.register_buffer(base, buf.nbytes)
    keys = [f"flat-{i}" for i in range(n)]
    ptrs = [base + i * 4096 for i in range(n)]
    cfg = ReplicateConfig(preferred_segments=("n1",))
    dp = c._dp
    seen: list[object] = []
    real = dp.start_flat

    def spy(op: object, items: object) -> object:
        seen.append(real(op, items))  # type: ignore[arg-type]
        return seen[-1]

    dp.start_flat = spy  # type: ignore[method-assign]

    def shm_done() -> int:
        snap = c._eng.snapshot()
        return next(t.requests_completed for t in snap.transports if t.name == "shm")

    before = shm_done()
    assert c.batch_put_from(keys, ptrs, [4096] * n, cfg) == [None] * n
    assert (
        c.batch_get_into(keys, [base + (n + i) * 4096 for i in range(n)], [4096] * n) == [4096] * n
    )
    assert bytes(dst) == bytes(src)
    assert len(seen) == 2 and all(p is not None for p in seen)  # both went the flat way
    assert shm_done() - before == 2 * n
    assert c.transport_of("n1") == "shm"

    # A slice beyond its segment's end, a buffer range beyond its region: refused
    # whole, before any byte moves (start() then reports the item).
    (region, off) = c._buffers.find(base, 4096)
    seg = c.stat(keys[0]).replicas[0][0]
    segments = own_cluster.snapshot()["segments"]  # n1's capacity, from the master
    cap = next(s["capacity"] for s in segments if s["name"] == "n1")
    dst[:] = 0
    assert real(OpCode.READ, [(region, off + n * 4096, "n1", seg.offset, 4096),
                              (region, off, "n1", cap - 100, 4096)]) is None  # fmt: skip
    assert real(OpCode.READ, [(region, buf.nbytes - 100, "n1", seg.offset, 4096)]) is None
    assert not dst.any()
    assert real(OpCode.READ, [(region, off + n * 4096, "n1", seg.offset, 4096)]) is not None
    assert bytes(dst[:4096]) == bytes(src[:4096])

    # The node is SIGKILLed: its file stays mapped here, so a copy "succeeds" into
    # memory nobody serves. A write there is an error naming the exited process and the
    # batch places those keys again on the live node.
    victim = own_cluster.nodes["n1"].proc
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    p = real(OpCode.WRITE, [(region, off, "n1", seg.offset, 4096)])
    assert p is not None and p.errors[0] is not None and f"{victim.pid}" in p.errors[0]
    assert p.failed == [{"n1"}]
    again = [f"again-{i}" for i in range(n)]
    assert c.batch_put_from(again, ptrs, [4096] * n, cfg) == [None] * n
    tcp = make_client(own_cluster, transport="tcp")
    for i, k in enumerate(again):
        assert tcp.stat(k).replicas[0][0].segment == "n0"
        assert tcp.get(k) == bytes(src[i * 4096 : (i + 1) * 4096])
    tcp.close()
    c.close()
    remove_shm_of(victim.pid)
