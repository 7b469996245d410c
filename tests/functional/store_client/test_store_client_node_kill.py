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
