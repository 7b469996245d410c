"""Grants through the real processes: a writer's next put of the same size is one
transfer and one exchange with the master (docs/store.md, "Grants").

A real master and node; clients over tcp and shm. What the master counts
(``master_rpc_requests_total``) shows which path each put took; every value is read
back by another client, so a put that landed in the wrong range would show.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from store_client_procs import TEST_MASTER, Cluster, make_client, start_cluster

from mooncake_core.store.client import Client
from mooncake_core.store.errors import ConflictError, ErrorCode

pytestmark = pytest.mark.integration

PUT_TIMEOUT_S = 1.0
MASTER = {**TEST_MASTER, "put_timeout_s": PUT_TIMEOUT_S, "stage_timeout_s": 1.0}
SIZE = 64 << 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp: Path = tmp_path_factory.mktemp("grants")
    c = start_cluster(tmp, nodes=("n0",), master_settings=MASTER, node_size="64MiB")
    try:
        yield c
    finally:
        c.close()


def allocated(c: Cluster) -> int:
    return int(c.snapshot()["allocated_bytes"])


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before.get(k, 0)) for k, v in after.items() if v != before.get(k, 0)}


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_puts_of_one_size_take_one_exchange_each_and_read_back(
    cluster: Cluster, transport: str
) -> None:
    base = allocated(cluster)
    with (
        make_client(cluster, transport=transport) as w,
        make_client(cluster, transport=transport) as r,
    ):
        before = cluster.rpc_calls()
        keys = [f"{transport}/g{i}" for i in range(5)]
        for i, k in enumerate(keys):
            w.put(k, bytes([i + 1]) * SIZE)
        d = delta(before, cluster.rpc_calls())
        # The first put is PutStart + PutCommit (its PutEnd, asking for a grant); the
        # four after it only PutCommit, each granted the next.
        assert (d.get("PutStart"), d.get("PutCommit")) == (1, 5), d
        for i, k in enumerate(keys):
            assert r.get(k) == bytes([i + 1]) * SIZE
        assert allocated(cluster) - base == 6 * SIZE  # and the grant for a sixth put
        # A put of an existing key is refused; the grant stays for the next put.
        with pytest.raises(ConflictError) as e:
            w.put(keys[0], b"x" * SIZE)
        assert e.value.code == ErrorCode.OBJECT_ALREADY_EXISTS
        assert r.get(keys[0]) == bytes([1]) * SIZE
        before = cluster.rpc_calls()
        w.put(f"{transport}/g5", b"\x07" * SIZE)
        assert delta(before, cluster.rpc_calls()).get("PutStart") is None
        # A grant rides only on a put's end (whose reply waits for durable records).
        assert w._m.put_commit("", next_size=SIZE) is None
        # Another size: the usual way; the unused grant is given back with that put.
        w.put(f"{transport}/small", b"s" * 4096)
        assert r.get(f"{transport}/g5") == b"\x07" * SIZE
    # Closed: the grant it held is given back; what is left is the objects.
    assert allocated(cluster) - base == 6 * SIZE + 4096


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_put_above_put_grant_max_bytes_ends_without_a_grant(
    cluster: Cluster, transport: str
) -> None:
    # The commit's reply carries no grant then (None): the put is done, not asked again.
    big = 4 << 20  # put_grant_max_bytes
    with (
        make_client(cluster, transport=transport) as w,
        make_client(cluster, transport=transport) as r,
    ):
        for i, n in enumerate((big + 1, big + 1)):
            before = cluster.rpc_calls()
            w.put(f"{transport}/big{i}", bytes([i + 1]) * n)
            d = delta(before, cluster.rpc_calls())
            assert (d.get("PutStart"), d.get("PutCommit")) == (1, 1), d
            assert r.get(f"{transport}/big{i}") == bytes([i + 1]) * n
            assert cluster.snapshot()["grant_count"] == 0
            w.remove(f"{transport}/big{i}", force=True)  # room for the next


def test_a_grant_older_than_half_the_put_timeout_is_not_used(cluster: Cluster) -> None:
    # The transfer window counts from before the grant was asked; a grant too old to
    # finish in it is given back and the put goes the usual way, bytes intact.
    with make_client(cluster, transport="tcp") as w, make_client(cluster, transport="tcp") as r:
        w.put("old/0", b"a" * SIZE)
        time.sleep(PUT_TIMEOUT_S / 2 + 0.1)
        before = cluster.rpc_calls()
        w.put("old/1", b"b" * SIZE)
        d = delta(before, cluster.rpc_calls())
        assert (d.get("PutStart"), d.get("PutCommit")) == (1, 1), d
        assert (r.get("old/0"), r.get("old/1")) == (b"a" * SIZE, b"b" * SIZE)


def _batch(w: Client, keys: list[str], src: np.ndarray, size: int) -> list[object]:
    base = w.register_buffer(src)
    try:
        return list(
            w.batch_put_from(keys, [base + i * size for i in range(len(keys))], [size] * len(keys))
        )
    finally:
        w.unregister_buffer(base)


def _values(n: int, size: int, seed: int) -> np.ndarray:
    return np.frombuffer(np.random.default_rng(seed).bytes(n * size), dtype=np.uint8).copy()


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_batches_of_one_size_take_one_exchange_each_and_read_back(
    cluster: Cluster, transport: str
) -> None:
    n, size = 16, 4096
    base = allocated(cluster)
    with (
        make_client(cluster, transport=transport) as w,
        make_client(cluster, transport=transport) as r,
    ):
        for b in range(3):
            src = _values(n, size, b)
            keys = [f"{transport}/batch{b}/{i}" for i in range(n)]
            before = cluster.rpc_calls()
            assert _batch(w, keys, src, size) == [None] * n
            d = delta(before, cluster.rpc_calls())
            # The first batch is BatchPutStart + BatchPutCommit (its end, asking for the
            # next batch's grants); the two after it only BatchPutCommit.
            assert (d.get("BatchPutStart"), d.get("BatchPutCommit")) == (
                1 if b == 0 else None,
                1,
            ), d
            for i, k in enumerate(keys):
                assert r.get(k) == src[i * size : (i + 1) * size].tobytes(), k
        assert cluster.snapshot()["grant_count"] == n  # the next batch's, held
        # A key that exists is refused alone; the others are stored through their grants.
        src = _values(n, size, 9)
        keys = [f"{transport}/batch3/{i}" for i in range(n)]
        keys[5] = f"{transport}/batch0/5"
        got = _batch(w, keys, src, size)
        assert isinstance(got[5], ConflictError) and got[5].code == ErrorCode.OBJECT_ALREADY_EXISTS
        assert got[:5] + got[6:] == [None] * (n - 1)
        assert r.get(keys[5]) == _values(n, size, 0)[5 * size : 6 * size].tobytes()
        assert r.get(keys[6]) == src[6 * size : 7 * size].tobytes()
    # Closed: the grants it held and the refused one are given back.
    assert cluster.snapshot()["grant_count"] == 0
    assert allocated(cluster) - base == (4 * n - 1) * size


def test_a_batch_grant_the_master_no_longer_knows_is_put_again_the_usual_way(
    cluster: Cluster,
) -> None:
    # The master answers STALE for each key (its grant released behind the client's
    # back, as after a failover); those keys go PutStart, transfer, PutEnd again, and
    # every value reads back as written.
    n, size = 8, 4096
    with make_client(cluster, transport="tcp") as w, make_client(cluster, transport="tcp") as r:
        assert _batch(w, [f"stale/a{i}" for i in range(n)], _values(n, size, 1), size) == [None] * n
        held = w._grants._batch
        assert held is not None and len(held.grant_ids) == n
        w._m.batch_put_commit([], release=list(held.grant_ids))
        assert cluster.snapshot()["grant_count"] == 0
        src = _values(n, size, 2)
        keys = [f"stale/b{i}" for i in range(n)]
        before = cluster.rpc_calls()
        assert _batch(w, keys, src, size) == [None] * n
        d = delta(before, cluster.rpc_calls())
        assert (d.get("BatchPutCommit"), d.get("BatchPutStart")) == (2, 1), d
        for i, k in enumerate(keys):
            assert r.get(k) == src[i * size : (i + 1) * size].tobytes(), k


def test_a_batch_grant_older_than_half_the_put_timeout_is_not_used(cluster: Cluster) -> None:
    n, size = 4, 4096
    with make_client(cluster, transport="shm") as w, make_client(cluster, transport="shm") as r:
        assert _batch(w, [f"oldb/a{i}" for i in range(n)], _values(n, size, 3), size) == [None] * n
        time.sleep(PUT_TIMEOUT_S / 2 + 0.1)
        src = _values(n, size, 4)
        before = cluster.rpc_calls()
        assert _batch(w, [f"oldb/b{i}" for i in range(n)], src, size) == [None] * n
        d = delta(before, cluster.rpc_calls())
        assert (d.get("BatchPutStart"), d.get("BatchPutCommit")) == (1, 1), d
        assert r.get("oldb/b3") == src[3 * size :].tobytes()
