"""The master's fast control channel against the real `mooncake master` process.

The hot calls (exist, replica lookup, put start/end/revoke, remove, their batch forms)
travel the fast channel; they must answer exactly what gRPC answers, refuse anyone
without the cluster token before reading anything large, survive bad frames, and fall
back to gRPC (never losing or doubling a write) when the channel is gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf.message import Message
from prometheus_client.parser import text_string_to_metric_families
from store_proc_support import MasterProc, http_get

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.client.sync_master import SyncMaster
from mooncake_core.store.errors import AuthError, ConflictError, NotFoundError, StoreError
from mooncake_core.store.fast_control import (
    AUTH_FAILED,
    BAD,
    HELLO,
    MAX_FRAME,
    OK,
    OP_BY_NAME,
    FastRefused,
    FastUnknownOp,
    FastUnsent,
)
from mooncake_core.store.fast_control_client import FastConnection, unix_reachable
from mooncake_core.store.fast_packed import unpack_read_versioned, unpack_reads
from mooncake_core.store.results import GetResult, ReplicateConfig

pytestmark = pytest.mark.integration

StartMaster = Callable[..., MasterProc]
SECRET = b"s3cret-for-fast-tests"
HEADER = struct.Struct(">IBI")


def _secret_file(tmp_path: Path) -> Path:
    f = tmp_path / "secret"
    f.write_bytes(SECRET + b"\n")
    f.chmod(0o600)
    return f


def _health(m: MasterProc) -> dict[str, object]:
    return json.loads(http_get(m.metrics_url + "/health"))  # type: ignore[no-any-return]


def _fast_port(m: MasterProc) -> int:
    return int(_health(m)["readiness"]["fast_port"])  # type: ignore[index]


def _mount(m: MasterProc, secret: bytes | None) -> None:
    async def go() -> None:
        async with MasterClient(m.address, client_id="node", secret=secret) as mc:
            await mc.mount_segment("seg", 1 << 30, transport_address="127.0.0.1:1")

    asyncio.run(go())


def _metric(m: MasterProc, name: str, **labels: str) -> float:
    text = http_get(m.metrics_url + "/metrics").decode()
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _raw(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


def _read_frame(s: socket.socket) -> tuple[int, int, bytes]:
    head = b""
    while len(head) < HEADER.size:
        chunk = s.recv(HEADER.size - len(head))
        if not chunk:
            raise EOFError("closed")
        head += chunk
    length, kind, call_id = HEADER.unpack(head)
    body = b""
    while len(body) < length:
        body += s.recv(length - len(body))
    return kind, call_id, body


def _packed_call(m: MasterProc, op: str, request: Message) -> bytes:
    """One call of packed op ``op`` over a raw connection (no secret): its reply bytes."""
    s = _raw(_fast_port(m))
    s.sendall(HEADER.pack(0, HELLO, 1))
    assert _read_frame(s) == (OK, 1, b"")
    body = request.SerializeToString()
    s.sendall(HEADER.pack(len(body), OP_BY_NAME[op].code, 2) + body)
    kind, call_id, reply = _read_frame(s)
    s.close()
    assert (kind, call_id) == (OK, 2)
    return reply


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_hot_calls_over_the_fast_channel_answer_what_grpc_answers(
    start_master: StartMaster, tmp_path: Path
) -> None:
    m = start_master(extra=["--secret-file", str(_secret_file(tmp_path))])
    assert _fast_port(m) > 0
    _mount(m, SECRET)
    fast = SyncMaster(m.address, "writer", SECRET, timeout_s=5)
    slow = SyncMaster(m.address, "reader", SECRET, timeout_s=5, fast=False)
    try:
        fast.wait_ready(5)
        slow.wait_ready(5)
        reps = fast.put_start("a", 4096, None)
        assert slow.exist("a") is False  # not visible before PutEnd, on either path
        fast.put_end("a")
        assert fast.exist("a") and slow.exist("a")
        got_fast, got_slow = fast.get_replica_list("a"), slow.get_replica_list("a")
        assert got_fast.replicas == got_slow.replicas
        assert got_fast.replicas == reps and got_fast.size == 4096
        results = fast.batch_put_start([("b", 100), ("c", 200), ("a", 1)], None)
        assert [type(r).__name__ for r in results[:2]] == ["tuple", "tuple"]
        assert isinstance(results[2], ConflictError)
        assert fast.batch_put_end(["b", "c"]) == [None, None]
        assert fast.batch_exist(["a", "b", "c", "d"]) == [True, True, True, False]
        assert slow.batch_exist(["a", "b", "c", "d"]) == [True, True, True, False]
        assert fast.batch_get_replica_list(["b"])[0].size == 100  # type: ignore[union-attr]
        fast.put_start("r", 64, None)
        fast.put_revoke("r")
        fast.remove("a", force=True)  # leased by the lookups above
        removed = fast.batch_remove(["b", "zz"], force=True)
        assert removed[0] is None and isinstance(removed[1], NotFoundError)
        assert not slow.exist("a") and not slow.exist("b") and slow.exist("c")
        with pytest.raises(NotFoundError):
            fast.get_replica_list("a")
        # Every hot call went over the fast channel, none of the reader's did.
        assert fast.fast_calls == 13 and slow.fast_calls == 0
        # The master counted them under the same RPC names as gRPC calls, and apart.
        assert _metric(m, "master_rpc_requests_total", rpc="Exist") == 6  # 5 over gRPC
        assert _metric(m, "master_fast_calls_total", rpc="Exist") == 1
        assert _metric(m, "master_fast_calls_total", rpc="PutEnd") == 1
        assert _metric(m, "master_fast_calls_total") == 13
    finally:
        fast.close()
        slow.close()


def test_packed_batch_replies_carry_what_grpc_carries(start_master: StartMaster) -> None:
    """Batch put starts and replica lookups answer in the packed layout over the fast
    channel; the client reads back exactly what the protobuf replies over gRPC say,
    with two replicas a key, errors in between, and keys the master refuses."""
    m = start_master()
    _mount(m, None)

    async def second() -> None:
        async with MasterClient(m.address, client_id="node-2") as mc:
            await mc.mount_segment("seg-2", 1 << 30, transport_address="127.0.0.1:2")

    asyncio.run(second())
    fast = SyncMaster(m.address, "writer", None, timeout_s=5)
    slow = SyncMaster(m.address, "reader", None, timeout_s=5, fast=False)
    try:
        two = ReplicateConfig(replica_num=2)
        placed = fast.batch_put_start([("p", 5000), ("q", 1), ("p", 7)], two)
        assert isinstance(placed[2], ConflictError)  # "p" twice in one batch
        for reps in placed[:2]:
            assert isinstance(reps, tuple) and len(reps) == 2
            assert {s.segment for r in reps for s in r} == {"seg", "seg-2"}
        assert fast.batch_put_end(["p", "q"]) == [None, None]
        keys = ["p", "missing", "q", ""]
        got, want = fast.batch_get_replica_list(keys), slow.batch_get_replica_list(keys)
        assert [type(x) for x in got] == [type(x) for x in want]
        assert got[0] == want[0] and got[2] == want[2]
        assert [x.replicas for x in got[::2]] == placed[:2]  # type: ignore[union-attr]
        for a, b in ((got[1], want[1]), (got[3], want[3])):
            assert isinstance(a, StoreError) and isinstance(b, StoreError)
            assert (a.code, a.message) == (b.code, b.message)
        assert isinstance(got[1], NotFoundError)
        # Per-key outcomes (BatchPutEnd) too: the same errors as over gRPC.
        ended, ended_slow = fast.batch_put_end(["p", "zz"]), slow.batch_put_end(["p", "zz"])
        assert [type(e) for e in ended] == [ConflictError, NotFoundError]
        assert [(e.code, e.message) for e in ended] == [  # type: ignore[union-attr]
            (e.code, e.message)  # type: ignore[union-attr]
            for e in ended_slow
        ]
        assert fast.fast_calls == 4 and slow.fast_calls == 0
        # Counted under the RPC they serve, beside its gRPC calls.
        assert _metric(m, "master_fast_calls_total", rpc="BatchGetReplicaList") == 1
        assert _metric(m, "master_fast_calls_total", rpc="BatchPutStart") == 1
        assert _metric(m, "master_fast_calls_total", rpc="BatchPutEnd") == 2
    finally:
        fast.close()
        slow.close()
    # The bytes on the wire are the packed layout.
    reply = _packed_call(m, "BatchGetReplicaListPacked", pb.BatchKeysRequest(keys=["q"]))
    (only,) = unpack_reads(["q"], reply)
    assert only == want[2]


def test_packed_single_replies_carry_what_grpc_carries(start_master: StartMaster) -> None:
    """PutStart, Upsert and GetReplicaList answer in the packed layout over the fast
    channel too: the same replicas and lease as the protobuf replies over gRPC, and the
    same errors raised (already exists, not found, being written)."""
    m = start_master()
    _mount(m, None)
    fast = SyncMaster(m.address, "writer", None, timeout_s=5)
    slow = SyncMaster(m.address, "reader", None, timeout_s=5, fast=False)
    try:
        reps = fast.put_start("a", 5000, None)
        assert isinstance(reps, tuple) and reps[0][0].length == 5000
        with pytest.raises(ConflictError) as fast_err:
            fast.get_replica_list("a")  # being written
        with pytest.raises(ConflictError) as slow_err:
            slow.get_replica_list("a")
        assert (fast_err.value.code, fast_err.value.message) == (
            slow_err.value.code,
            slow_err.value.message,
        )
        fast.put_end("a")
        got, want = fast.get_replica_list("a"), slow.get_replica_list("a")
        assert got.replicas == reps and got.size == 5000
        # gRPC carries no version: the same answer, version 0 ("not known").
        assert got == dataclasses.replace(want, version=got.version)
        assert got.version != 0 and want.version == 0
        assert fast.get_replica_list("a").version == got.version  # reads do not change it
        with pytest.raises(ConflictError, match="already exists"):
            fast.put_start("a", 10, None)
        with pytest.raises(NotFoundError) as fast_missing:
            fast.get_replica_list("missing")
        with pytest.raises(NotFoundError) as slow_missing:
            slow.get_replica_list("missing")
        assert fast_missing.value.message == slow_missing.value.message
        fast.remove("a", force=True)
        new = fast.upsert("a", 64, None)
        fast.put_end("a")
        assert fast.get_replica_list("a").replicas == new == slow.get_replica_list("a").replicas
        assert fast.fast_calls == 11 and slow.fast_calls == 0
        # Counted under the RPC they serve.
        assert _metric(m, "master_fast_calls_total", rpc="PutStart") == 2
        assert _metric(m, "master_fast_calls_total", rpc="GetReplicaList") == 5
        assert _metric(m, "master_fast_calls_total", rpc="Upsert") == 1
    finally:
        fast.close()
        slow.close()
    # The bytes on the wire are the packed layout.
    # This version's lookup carries the replica set's version; an earlier client's op
    # (GetReplicaListPacked) is still answered, without it.
    reply = _packed_call(m, "GetReplicaListVersioned", pb.GetReplicaListRequest(key="a"))
    versioned = unpack_read_versioned("a", reply)
    assert isinstance(versioned, GetResult) and versioned.replicas == new
    assert versioned.version not in (0, got.version)  # upsert: a new object
    reply = _packed_call(m, "GetReplicaListPacked", pb.GetReplicaListRequest(key="a"))
    (only,) = unpack_reads(["a"], reply)
    assert only == dataclasses.replace(versioned, version=0)


def test_a_wrong_or_missing_token_is_refused_before_anything_is_read(
    start_master: StartMaster, tmp_path: Path
) -> None:
    m = start_master(extra=["--secret-file", str(_secret_file(tmp_path))])
    port = _fast_port(m)
    with pytest.raises(FastRefused, match="missing or wrong cluster token"):
        FastConnection(f"127.0.0.1:{port}", b"not-the-secret", 5)
    with pytest.raises(FastRefused):
        FastConnection(f"127.0.0.1:{port}", None, 5)
    # A request before HELLO is refused, and the connection closed.
    s = _raw(port)
    body = pb.ExistRequest(key="a").SerializeToString()
    s.sendall(HEADER.pack(len(body), 1, 7) + body)
    kind, call_id, _ = _read_frame(s)
    assert (kind, call_id) == (AUTH_FAILED, 7) and _closed(s)
    # A huge frame before HELLO is refused from its header alone: nothing is buffered.
    s = _raw(port)
    s.sendall(HEADER.pack(1 << 30, HELLO, 1))
    kind, _, text = _read_frame(s)
    assert kind == BAD and b"exceeds" in text and _closed(s)
    assert _metric(m, "master_auth_failures_total", rpc="FastControl") == 3
    # A client with the wrong secret gets AuthError (from gRPC, after the fast refusal).
    bad = SyncMaster(m.address, "intruder", b"not-the-secret", timeout_s=5)
    try:
        with pytest.raises(AuthError):
            bad.exist("a")
        assert bad.fast_calls == 0
    finally:
        bad.close()


def test_a_client_on_the_masters_host_uses_its_unix_socket_with_the_same_token(
    start_master: StartMaster, tmp_path: Path
) -> None:
    """The master advertises an abstract Unix socket beside the port; a client on the
    same host takes it, the calls answer what TCP answers, and it asks the token first."""
    m = start_master(extra=["--secret-file", str(_secret_file(tmp_path))])
    name = str(_health(m)["readiness"]["fast_unix"])  # type: ignore[index]
    assert name.startswith("@mooncake-fast-") and len(name) > len("@mooncake-fast-") + 16
    _mount(m, SECRET)
    c = SyncMaster(m.address, "w", SECRET, timeout_s=5)
    try:
        c.put_start("k", 10, None)
        c.put_end("k")
        assert c.exist("k") and not c.exist("nope")
        assert c._fast_address(m.address) == "unix:" + name
        assert c.fast_calls == 4
        assert _metric(m, "master_fast_calls_total", rpc="Exist") == 2
    finally:
        c.close()
    with pytest.raises(FastRefused, match="missing or wrong cluster token"):
        FastConnection("unix:" + name, b"not-the-secret", 5)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect("\0" + name[1:])
    body = pb.ExistRequest(key="k").SerializeToString()
    s.sendall(HEADER.pack(len(body), 1, 9) + body)  # a request before HELLO
    kind, call_id, _ = _read_frame(s)
    assert (kind, call_id) == (AUTH_FAILED, 9) and _closed(s)
    ok = FastConnection("unix:" + name, SECRET, 5)
    try:
        reply = ok.call("Exist", pb.ExistRequest(key="k"))
        assert isinstance(reply, pb.ExistResponse) and reply.exists
    finally:
        ok.close()


def test_without_the_unix_socket_or_out_of_its_reach_clients_use_the_port(
    start_master: StartMaster,
) -> None:
    """``master.fast_unix: false`` advertises none; a name this host does not have (a
    master on another host, or in another network namespace) is not reachable, so the
    client keeps the TCP port."""
    assert not unix_reachable("@mooncake-fast-" + "0" * 24, 1.0)
    m = start_master(fast_unix=False)
    assert _health(m)["readiness"]["fast_unix"] == ""  # type: ignore[index]
    _mount(m, None)
    c = SyncMaster(m.address, "w", None, timeout_s=5)
    try:
        c.put_start("k", 10, None)
        c.put_end("k")
        assert c.exist("k") and c.fast_calls == 3
        assert c._fast_address(m.address) == f"127.0.0.1:{_fast_port(m)}"
    finally:
        c.close()


def test_bad_frames_get_an_error_and_keep_the_master_serving(start_master: StartMaster) -> None:
    m = start_master()
    port = _fast_port(m)
    s = _raw(port)
    s.sendall(HEADER.pack(0, HELLO, 1))
    assert _read_frame(s) == (OK, 1, b"")
    s.sendall(HEADER.pack(0, 250, 2))  # no such op: an error, the connection stays
    kind, call_id, text = _read_frame(s)
    assert (kind, call_id) == (BAD, 2) and b"unknown op 250" in text
    junk = b"\xff\xff\xff\xff"
    s.sendall(HEADER.pack(len(junk), 1, 3) + junk)  # undecodable Exist request
    kind, call_id, text = _read_frame(s)
    assert (kind, call_id) == (BAD, 3) and b"undecodable" in text
    body = pb.ExistRequest(key="nothing").SerializeToString()
    s.sendall(HEADER.pack(len(body), 1, 4) + body)
    kind, call_id, reply = _read_frame(s)
    assert (kind, call_id) == (OK, 4) and pb.ExistResponse.FromString(reply).exists is False
    s.sendall(HEADER.pack(MAX_FRAME + 1, 1, 5))  # too large even for a trusted peer
    kind, _, text = _read_frame(s)
    assert kind == BAD and b"exceeds" in text and _closed(s)
    assert _health(m)["readiness"]["serving"] is True  # type: ignore[index]


def test_without_a_fast_channel_every_call_goes_over_grpc(
    start_master: StartMaster, tmp_path: Path
) -> None:
    m = start_master(fast_port=None)
    assert _fast_port(m) == 0
    _mount(m, None)
    c = SyncMaster(m.address, "w", None, timeout_s=5)
    try:
        c.put_start("k", 10, None)
        c.put_end("k")
        assert c.exist("k") and c.fast_calls == 0
    finally:
        c.close()


def test_a_restarted_master_is_found_again_and_no_write_is_lost_or_doubled(
    start_master: StartMaster, tmp_path: Path
) -> None:
    """The fast connection dies with the master: the next call falls back to gRPC
    (which reconnects), then the client learns the new fast channel and uses it."""
    data = tmp_path / "journal"
    m = start_master(data_dir=str(data))
    port, fport = m.address.rsplit(":", 1)[1], _fast_port(m)
    _mount(m, None)
    c = SyncMaster(m.address, "w", None, timeout_s=10)
    try:
        c.put_start("before", 10, None)
        c.put_end("before")
        before = c.fast_calls
        assert before == 2
        m.proc.terminate()
        assert m.proc.wait(10) == 0
        m2 = start_master(extra=["--port", port, "--fast-port", str(fport)], data_dir=str(data))
        assert _fast_port(m2) == fport
        assert c.exist("before")  # the dead connection: answered over gRPC
        c.put_start("after", 10, None)
        c.put_end("after")
        assert c.batch_exist(["before", "after"]) == [True, True]
        assert c.fast_calls >= before + 3  # back on the fast channel
    finally:
        c.close()


def test_a_master_that_never_answers_costs_one_deadline_not_a_hang() -> None:
    # A peer that accepts and then says nothing (a paused master's kernel still
    # completes the handshake): the HELLO must give up at the deadline.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(FastUnsent, match=address):
            FastConnection(address, None, timeout_s=0.4)
        took = time.monotonic() - t0
    assert 0.35 <= took < 2.0, took


def test_a_master_without_the_packed_ops_is_told_apart_from_a_lost_call() -> None:
    """An older master answers a packed op "unknown op N" (and did nothing): that is
    FastUnknownOp, so the client falls back to the protobuf op on the same connection
    instead of treating the call as lost. Here the older master is a scripted peer."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)

        def peer() -> None:
            conn, _ = srv.accept()
            with conn:
                for _ in range(3):
                    kind, call_id, _body = _read_frame(conn)
                    reply = b"" if kind == HELLO else f"unknown op {kind}".encode()
                    conn.sendall(HEADER.pack(len(reply), OK if kind == HELLO else BAD, call_id))
                    conn.sendall(reply)

        t = threading.Thread(target=peer, daemon=True)
        t.start()
        c = FastConnection(f"127.0.0.1:{srv.getsockname()[1]}", None, timeout_s=5)
        try:
            req = pb.BatchKeysRequest(client_id="c", keys=["k"])
            for _ in range(2):  # the connection stays usable
                with pytest.raises(FastUnknownOp, match="unknown op 15"):
                    c.call("BatchGetReplicaListPacked", req)
        finally:
            c.close()
        t.join(5)
