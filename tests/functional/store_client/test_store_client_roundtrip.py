"""Round trips through real processes: a master, two store nodes, clients in this process."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from store_client_procs import Cluster, make_client, start_cluster

from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import SegmentSpec
from mooncake_core.store.errors import ErrorCode, NotFoundError, StoreError

pytestmark = pytest.mark.integration

KiB, MiB = 1 << 10, 1 << 20


def blob(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def sha(b: bytes | memoryview) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("size", [4 * KiB, 1 * MiB])
@pytest.mark.parametrize("which", ["client", "tcp_client"])
def test_put_get_checksums(size: int, which: str, request: pytest.FixtureRequest) -> None:
    c: Client = request.getfixturevalue(which)
    key = f"rt/{which}/{size}"
    data = blob(size, size)
    c.put(key, data)
    assert sha(c.get(key)) == sha(data)
    assert c.get_size(key) == size
    assert c.is_exist(key)
    seg = c.stat(key).replicas[0][0].segment
    assert c.transport_of(seg) == ("shm" if which == "client" else "tcp")
    c.remove(key, force=True)
    assert not c.is_exist(key)


def test_zero_copy_70mib_sliced_across_both_nodes(client: Client) -> None:
    n = 70 * MiB
    src = np.frombuffer(bytearray(blob(n, 70)), dtype=np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    a, b = client.register_buffer(src), client.register_buffer(dst)
    try:
        client.put_from("big/70", a, n)
        info = client.stat("big/70")
        assert {s.segment for s in info.replicas[0]} == {"n0", "n1"}  # 64 MiB nodes
        assert sum(s.length for s in info.replicas[0]) == n
        assert client.get_into("big/70", b, n) == n
        assert sha(dst) == sha(src)
    finally:
        client.remove("big/70", force=True)
        client.unregister_buffer(a)
        client.unregister_buffer(b)


def test_two_replicas_on_distinct_nodes_each_readable(client: Client) -> None:
    data = blob(1 * MiB, 2)
    client.put("rep/2", data, ReplicateConfig(replica_num=2))
    reps = client.stat("rep/2").replicas
    assert len(reps) == 2
    assert {r[0].segment for r in reps} == {"n0", "n1"}
    assert client.get("rep/2") == data
    client.remove("rep/2", force=True)


def test_batch_calls_per_item_results(client: Client) -> None:
    keys = [f"batch/{i}" for i in range(16)]
    vals = [blob(4 * KiB + i, i) for i in range(16)]
    assert client.put_batch(keys, vals) == [None] * 16
    got = client.get_batch([*keys, "batch/missing"])
    assert got[:16] == vals
    assert isinstance(got[16], NotFoundError)
    assert client.batch_is_exist(["batch/0", "batch/missing"]) == [True, False]
    # zero-copy batches
    src = np.frombuffer(bytearray(b"".join(blob(64 * KiB, 100 + i) for i in range(8))), np.uint8)
    dst = np.zeros_like(src)
    a, b = client.register_buffer(src), client.register_buffer(dst)
    zk = [f"zbatch/{i}" for i in range(8)]
    offs = [i * 64 * KiB for i in range(8)]
    res = client.batch_put_from(zk, [a + o for o in offs], [64 * KiB] * 8)
    assert res == [None] * 8
    dup = client.batch_put_from(["zbatch/0"], [a], [64 * KiB])
    assert isinstance(dup[0], StoreError) and dup[0].code == ErrorCode.OBJECT_ALREADY_EXISTS
    sizes = client.batch_get_into(zk, [b + o for o in offs], [64 * KiB] * 8)
    assert sizes == [64 * KiB] * 8
    assert sha(dst) == sha(src)
    removed = client.remove_by_regex(r"^z?batch/", force=True)
    assert removed.removed == 24
    client.unregister_buffer(a)
    client.unregister_buffer(b)


def _batch_read_as_alone(
    c: Client, keys: list[str], offs: list[int], caps: list[int], alone_at: int, batch_at: int
) -> list[int | StoreError]:
    """Read ``keys`` with get_into one by one (at ``alone_at + offs``) and in one
    batch_get_into (at ``batch_at + offs``); assert each answer is the same; the batch's."""
    alone: list[object] = []
    for k, off, cap in zip(keys, offs, caps, strict=True):
        try:
            alone.append(c.get_into(k, alone_at + off, cap))
        except StoreError as e:
            alone.append((e.code, e.message))
    got = c.batch_get_into(keys, [batch_at + o for o in offs], caps)
    named = [(g.code, g.message) if isinstance(g, StoreError) else g for g in got]
    assert named == alone
    return got


@pytest.mark.parametrize("which", ["client", "tcp_client"])
def test_a_batch_read_of_mixed_items_answers_as_get_into_one_by_one(
    which: str, request: pytest.FixtureRequest
) -> None:
    # Plain items (one replica of one slice) are read in one pass, the others (two
    # replicas, missing, a buffer too small, a bad key) the general way: every item's
    # answer and bytes are what get_into gives it alone.
    c: Client = request.getfixturevalue(which)
    p = f"mixed/{which}/"
    n = 8 * KiB
    vals = {f"{p}a": blob(n, 1), f"{p}b": blob(n, 2)}
    for k, v in vals.items():
        c.put(k, v)
    c.put(f"{p}two", blob(n, 4), ReplicateConfig(replica_num=2))
    keys = [f"{p}a", f"{p}b", f"{p}two", f"{p}missing", f"{p}b", f"{p}a", ""]
    caps = [n, n - 1, n, n, n, n, n]
    offs = [sum(caps[:i]) for i in range(len(caps))]
    one, many = np.zeros(sum(caps), np.uint8), np.zeros(sum(caps), np.uint8)
    a1, a2 = c.register_buffer(one), c.register_buffer(many)
    try:
        got = _batch_read_as_alone(c, keys, offs, caps, a1, a2)
        assert [type(g) for g in got].count(int) == 4
        assert sha(many) == sha(one)
        assert many[offs[2] : offs[2] + n].tobytes() == blob(n, 4)
    finally:
        c.unregister_buffer(a1)
        c.unregister_buffer(a2)
        c.remove_by_prefix(p, force=True)


@pytest.mark.parametrize("which", ["client", "tcp_client"])
def test_a_batch_read_of_a_batch_written_through_grants_answers_as_get_into(
    which: str, request: pytest.FixtureRequest
) -> None:
    # The second batch is written through the grants the first got: one free range cut
    # in eight, so its replica lists come back as one run. Read back in that order with
    # one buffer too small, every answer and byte is get_into's alone.
    c: Client = request.getfixturevalue(which)
    p, n, count = f"run/{which}/", 4 * KiB, 8
    src = np.frombuffer(blob(2 * count * n, 9), np.uint8).copy()
    a = c.register_buffer(src)
    for b in range(2):
        keys = [f"{p}{b}/{i}" for i in range(count)]
        ptrs = [a + (b * count + i) * n for i in range(count)]
        assert c.batch_put_from(keys, ptrs, [n] * count) == [None] * count
    c.unregister_buffer(a)
    keys = [f"{p}1/{i}" for i in range(count)]
    caps = [n] * count
    caps[3] = n - 1
    offs = [i * n for i in range(count)]
    one, many = np.zeros(count * n, np.uint8), np.zeros(count * n, np.uint8)
    a1, a2 = c.register_buffer(one), c.register_buffer(many)
    try:
        got = _batch_read_as_alone(c, keys, offs, caps, a1, a2)
        assert [type(g) for g in got].count(int) == count - 1
        assert sha(many) == sha(one)
        assert many[: 2 * n].tobytes() == src[count * n : (count + 2) * n].tobytes()
    finally:
        c.unregister_buffer(a1)
        c.unregister_buffer(a2)
        c.remove_by_prefix(p, force=True)


def test_upsert_replaces_and_tensor_round_trip(client: Client) -> None:
    client.put("up/k", b"old value")
    client.upsert("up/k", b"new")
    assert client.get("up/k") == b"new"
    t = torch.arange(24, dtype=torch.bfloat16).reshape(2, 3, 4)
    client.put_tensor("up/t", t)
    back = client.get_tensor("up/t")
    assert back.dtype == torch.bfloat16 and back.shape == (2, 3, 4)
    assert torch.equal(back, t)
    client.remove_by_prefix("up/", force=True)


def test_own_segment_uses_local_memcpy(cluster: Cluster) -> None:
    with make_client(cluster, segments=(SegmentSpec(f"own-{os.getpid()}", 8 * MiB),)) as c:
        seg = c.segments[0]
        data = blob(2 * MiB, 9)
        c.put("own/k", data, ReplicateConfig(preferred_segments=(seg,)))
        assert c.stat("own/k").replicas[0][0].segment == seg
        assert c.transport_of(seg) == "local"
        assert c.get("own/k") == data
        c.remove("own/k", force=True)


def test_pins_through_client(client: Client) -> None:
    client.put("pinned/a", b"x")
    p = client.pin("pinned/", prefix=True, hard=True)
    assert p.hard and p.is_prefix
    assert any(q.target == "pinned/" for q in client.list_pins())
    assert client.stat("pinned/a").pin.name == "HARD"
    client.unpin("pinned/", prefix=True)
    assert client.stat("pinned/a").pin.name == "NONE"
    client.remove("pinned/a", force=True)


def test_bad_inputs_are_refused_and_nothing_stored_changes(client: Client) -> None:
    keep = {f"keep/{i}": blob(4 * KiB, 500 + i) for i in range(4)}
    for k, v in keep.items():
        client.put(k, v)
    before = client.list_keys()
    buf = np.zeros(64 * KiB, dtype=np.uint8)
    a = client.register_buffer(buf)
    cases: list[tuple[ErrorCode, object]] = [
        (ErrorCode.INVALID_KEY, lambda: client.put("", b"x")),
        (ErrorCode.INVALID_KEY, lambda: client.put("k" * 4097, b"x")),
        (ErrorCode.INVALID_PARAMS, lambda: client.put("empty", b"")),
        (ErrorCode.OBJECT_TOO_LARGE, lambda: client.put_from("huge", a, 101 * MiB)),
        (ErrorCode.INVALID_PARAMS, lambda: client.put_from("oob", a + 1, 64 * KiB)),
        (ErrorCode.INVALID_PARAMS, lambda: client.put_from("unreg", 4096, 16)),
        (ErrorCode.INVALID_PARAMS, lambda: client.get_into("keep/0", a, 16)),
        (ErrorCode.NO_AVAILABLE_SEGMENT, lambda: client.put("r3", b"x", ReplicateConfig(3))),
        (ErrorCode.OBJECT_ALREADY_EXISTS, lambda: client.put("keep/0", b"overwrite?")),
        (ErrorCode.OBJECT_NOT_FOUND, lambda: client.get("never/written")),
        (ErrorCode.INVALID_PARAMS, lambda: client.put_batch(["a", "b"], [b"x"])),
        (ErrorCode.INVALID_PARAMS, lambda: client.remove_by_regex("(")),
    ]
    for code, call in cases:
        with pytest.raises(StoreError) as ei:
            call()  # type: ignore[operator]
        assert ei.value.code == code, (code, ei.value)
        assert ei.value.message
    assert buf[:16].tolist() == [0] * 16  # the too-small get_into wrote nothing
    after = client.list_keys()
    assert after == before  # no half-written or new key
    assert client.get_batch(list(keep)) == list(keep.values())
    client.unregister_buffer(a)
    client.remove_by_prefix("keep/", force=True)


def test_pipelined_batches_of_1mib_round_trip(
    cluster: Cluster, client: Client, tcp_client: Client
) -> None:
    # 12 MiB: over tcp cut into 3 parts whose round trips overlap the engine's
    # transfers; over shm (every copy made in the caller's thread, nothing to overlap)
    # one part, one BatchPutStart and one BatchGetReplicaList, once the client has
    # opened the nodes' segments (a put of two replicas opens both).
    n, size = 12, 1 * MiB
    src = np.frombuffer(bytearray(blob(n * size, 12)), dtype=np.uint8)
    for c, parts in ((client, 1), (tcp_client, 3)):
        c.put(f"pipe/{id(c)}/warm", b"w", ReplicateConfig(replica_num=2))
        dst = np.zeros_like(src)
        a, b = c.register_buffer(src), c.register_buffer(dst)
        keys = [f"pipe/{id(c)}/{i}" for i in range(n)]
        offs = [i * size for i in range(n)]
        before = cluster.rpc_calls()
        assert c.batch_put_from(keys, [a + o for o in offs], [size] * n) == [None] * n
        got = c.batch_get_into([*keys, "pipe/none"], [b + o for o in offs] + [b], [size] * (n + 1))
        after = cluster.rpc_calls()
        d = {rpc: after.get(rpc, 0) - before.get(rpc, 0) for rpc in after}
        # A batch's puts end with BatchPutEnd, or with BatchPutCommit when the batch is
        # one part of one size (it asks for its next batch's grants: "Grants").
        ends = d.get("BatchPutEnd", 0) + d.get("BatchPutCommit", 0)
        got_calls = (d.get("BatchPutStart"), ends, d.get("BatchGetReplicaList"))
        assert got_calls == (parts, parts, parts), d
        assert got[:n] == [size] * n and isinstance(got[n], NotFoundError)
        assert sha(dst) == sha(src)
        c.unregister_buffer(a)
        c.unregister_buffer(b)
    assert client.remove_by_prefix("pipe/", force=True).removed == 2 * n + 2


def test_a_remembered_location_is_read_only_under_the_version_the_master_confirms(
    tmp_path: Path,
) -> None:
    # A tcp get reads where the key was last read while it asks the master, and keeps
    # those bytes only if the master answers the version they were read under. Here the
    # old location is made to hold another key's bytes (removed, the range reused by
    # "other", the key written again elsewhere): the get must return the key's new bytes.
    lease = 0.5  # a removed object's range is reused once the readers' leases end
    cluster = start_cluster(tmp_path, ("v0",), master_settings={"lease_ttl_s": lease})
    c = make_client(cluster, transport="tcp")
    n = 12 * KiB + 8
    dst = np.zeros(n, dtype=np.uint8)
    addr = c.register_buffer(dst)
    try:
        c.put("k", blob(n, 1))
        c.put("guard", blob(n, 2))  # k's range is not merged with the free space after it
        assert c.get("k") == blob(n, 1)  # read as usual, location remembered
        assert c.get("k") == blob(n, 1)  # read there while asking
        assert c.get_into("k", addr, n) == n and dst.tobytes() == blob(n, 1)
        assert c.overlapped_reads == [2, 0]
        (was,) = c.stat("k").replicas[0]

        c.remove("k", force=True)
        time.sleep(lease + 1.0)
        # Another writer: c holds a grant for its next put of this size (elsewhere).
        with make_client(cluster, transport="tcp") as o:
            o.put("other", blob(n, 3))
        assert c.stat("other").replicas[0] == (was,), "precondition: k's range reused"
        c.put("k", blob(n, 4))
        assert c.stat("k").replicas[0][0] != was
        assert c.get_into("k", addr, n) == n and dst.tobytes() == blob(n, 4)
        assert c.overlapped_reads == [2, 1]  # read there meanwhile, not used
        assert c.get("k") == blob(n, 4)  # from the new location, remembered anew
        assert c.overlapped_reads == [3, 1]

        # Removed: not found, whatever the remembered range holds; the buffer untouched.
        c.remove("k", force=True)
        dst[:] = 7
        with pytest.raises(NotFoundError):
            c.get_into("k", addr, n)
        assert dst.tobytes() == bytes([7]) * n
        with pytest.raises(NotFoundError):
            c.get("k")
    finally:
        c.unregister_buffer(addr)
        c.close()
        cluster.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_batch_read_stalled_past_its_lease_is_an_error_not_bytes(
    tmp_path: Path, transport: str
) -> None:
    # The reader stalls between its BatchGetReplicaList and the copies for longer than
    # the lease (as a process paused by a GC or VM steal): the ranges may hold other
    # keys' bytes by then, so each item is an error, over shm (one copy each, made here)
    # as over tcp. Unstalled, the same call reads the bytes.
    lease = 0.3
    cluster = start_cluster(tmp_path, ("v0",), master_settings={"lease_ttl_s": lease})
    c = make_client(cluster, transport=transport)
    n = 4 * KiB
    dst = np.zeros(2 * n, dtype=np.uint8)
    try:
        keys = ["s/0", "s/1"]
        assert c.put_batch(keys, [blob(n, 1), blob(n, 2)]) == [None, None]
        a = c.register_buffer(dst)
        ask = c._m.batch_get_replica_list

        def stalled(names: list[str]) -> object:
            got = ask(names)
            time.sleep(lease + 0.05)
            return got

        c._m.batch_get_replica_list = stalled  # type: ignore[method-assign]
        got = c.batch_get_into(keys, [a, a + n], [n, n])
        assert [getattr(g, "code", None) for g in got] == [ErrorCode.UNAVAILABLE] * 2, got
        assert all("longer than its read lease" in str(g) for g in got)
        del c._m.batch_get_replica_list
        assert c.batch_get_into(keys, [a, a + n], [n, n]) == [n, n]
        assert dst.tobytes() == blob(n, 1) + blob(n, 2)
    finally:
        c.close()
        cluster.close()
