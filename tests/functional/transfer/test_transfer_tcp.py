"""tcp transport between two real processes on loopback: data, batches, striping."""

from __future__ import annotations

import hashlib
import socket

import numpy as np
import pytest
import torch
from transfer_target_proc import pattern

from mooncake_core.transfer import (
    OpCode,
    SegmentInfo,
    TransferError,
    TransferRequest,
    TransferState,
)

pytestmark = pytest.mark.integration

MiB = 1 << 20


def test_read_and_write_roundtrip(start_target, make_engine):
    target = start_target(size=4 * MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    assert seg.transport == "tcp" and seg.size == 4 * MiB
    local = eng.register_memory(bytearray(4 * MiB))
    eng.read(local, 0, seg, 0, 4 * MiB)
    assert bytes(local.view()) == pattern(4 * MiB)

    data = bytes(reversed(pattern(3 * MiB + 17)))
    local.view()[: len(data)] = data
    eng.write(local, 0, seg, 1000, len(data))
    assert target.sha256(1000, len(data)) == hashlib.sha256(data).hexdigest()


def test_batch_status_wait_and_free(start_target, make_engine):
    target = start_target(size=2 * MiB)
    eng = make_engine()
    seg = eng.open_segment(target.segment_name)  # host:port alone: its only segment
    buf = np.zeros(2 * MiB, dtype=np.uint8)
    local = eng.register_memory(buf)
    batch = eng.allocate_batch(64)
    reqs = [
        TransferRequest(OpCode.READ, local, i * 32768, seg, i * 32768, 32768) for i in range(64)
    ]
    eng.submit(batch, reqs)
    statuses = eng.wait(batch, timeout=30)
    assert [s.state for s in statuses] == [TransferState.COMPLETED] * 64
    assert all(s.transferred == 32768 and s.reason is None for s in statuses)
    assert eng.status(batch, 5) == statuses[5]
    assert buf.tobytes() == pattern(2 * MiB)
    with pytest.raises(TransferError, match="capacity"):
        eng.submit(batch, reqs[:1])
    eng.free_batch(batch)
    with pytest.raises(TransferError, match="not allocated"):
        eng.submit(batch, reqs[:1])


class _FixedDirectory:
    """A SegmentDirectory that answers from a table (what the Store master will do)."""

    def __init__(self, infos):
        self.infos = {i.name: i for i in infos}

    def resolve(self, name):
        return self.infos[name]


def test_free_batch_refused_while_pending(make_engine):
    # A server that accepts connections but never speaks keeps requests WAITING until
    # the connect timeout: deterministic "pending" without racing a fast transfer.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    addr = f"127.0.0.1:{silent.getsockname()[1]}"
    info = SegmentInfo(name=f"{addr}/s", segment_id=1, size=MiB, nics=(addr,))
    eng = make_engine(
        directory=_FixedDirectory([info]),
        config={"connect_timeout_s": 0.5, "max_retries": 0, "request_timeout_s": 10},
    )
    seg = eng.open_segment(f"{addr}/s")
    local = eng.register_memory(bytearray(MiB))
    batch = eng.allocate_batch(1)
    eng.submit(batch, [TransferRequest(OpCode.READ, local, 0, seg, 0, MiB)])
    with pytest.raises(TransferError, match="pending"):
        eng.free_batch(batch)
    with pytest.raises(TransferError, match="in flight"):
        eng.unregister_memory(local)
    (status,) = eng.wait(batch, timeout=30)
    assert status.state is TransferState.FAILED
    assert "timed out" in (status.reason or "")
    eng.free_batch(batch)
    eng.unregister_memory(local)
    silent.close()


def test_invalid_requests_are_refused_before_sending(start_target, make_engine):
    target = start_target(size=MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(MiB))
    batch = eng.allocate_batch(4)
    cases = [
        (TransferRequest(OpCode.READ, local, 0, seg, MiB - 10, 11), "outside segment"),
        (TransferRequest(OpCode.READ, local, MiB, seg, 0, 1), "outside region"),
        (TransferRequest(OpCode.WRITE, local, -1, seg, 0, 1), "negative"),
    ]
    for req, match in cases:
        with pytest.raises(TransferError, match=match):
            eng.submit(batch, [req])
    assert eng.batch_status(batch) == []
    with pytest.raises(TransferError, match="no segment 'nope'"):
        eng.open_segment(target.segment_name + "/nope")


def test_register_numpy_torch_and_raw_address(start_target, make_engine):
    target = start_target(size=MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    t = torch.zeros(MiB // 4, dtype=torch.int32)
    r1 = eng.register_memory(t)
    eng.read(r1, 0, seg, 0, MiB)
    assert t.numpy().tobytes() == pattern(MiB)
    arr = np.zeros(MiB, dtype=np.uint8)
    r2 = eng.register_memory(arr.ctypes.data, MiB)
    eng.read(r2, 0, seg, 0, MiB)
    assert arr.tobytes() == pattern(MiB)
    with pytest.raises(TransferError, match="read-only"):
        eng.register_memory(b"immutable")
    with pytest.raises(TransferError, match="GPU"):
        eng.register_memory(bytearray(10), location="cuda:0")


def test_64mib_striped_over_three_nics_checksum(start_target, make_engine):
    nics = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    size = 64 * MiB
    target = start_target(size=size, nics=nics)
    eng = make_engine(nics=nics)
    seg = eng.open_segment(target.name)
    assert len(seg.info.nics) == 3
    local = eng.register_memory(bytearray(size))
    eng.read(local, 0, seg, 0, size)  # one request: must use every NIC
    assert hashlib.sha256(local.view()).digest() == hashlib.sha256(pattern(size)).digest()
    snap = eng.snapshot()
    for nic in nics:
        assert snap.nic(nic).bytes_received > 0, snap.nic(nic)
    got = sum(snap.nic(n).bytes_received for n in nics)
    assert got == size

    data = pattern(size, seed=99)
    local.view()[:] = data
    eng.write(local, 0, seg, 0, size)
    assert target.sha256(0, size) == hashlib.sha256(data).hexdigest()
    remote = {n["nic"]: n for n in target.snapshot()["nics"]}
    for nic in nics:
        assert remote[nic]["bytes_received"] > 0 and remote[nic]["bytes_sent"] > 0
    assert eng.snapshot().transport("tcp").requests_completed == 2


def test_mixed_reads_and_writes_on_one_connection_do_not_deadlock(start_target, make_engine):
    # READ responses the initiator has not read yet must never stop the server from
    # reading the WRITE payloads the initiator is sending on the same connection.
    # 4 MiB slices: eight unread READ responses exceed the socket buffers of both ends.
    n, block = 8, 4 * MiB
    target = start_target(size=2 * n * block)
    eng = make_engine(
        config={
            "connections_per_endpoint": 1,
            "slice_size": block,
            "request_timeout_s": 20,
            "max_retries": 0,
        }
    )
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(2 * n * block))
    data = pattern(n * block, seed=5)
    local.view()[n * block :] = data
    reqs = []
    for i in range(n):
        reqs.append(TransferRequest(OpCode.READ, local, i * block, seg, i * block, block))
        reqs.append(
            TransferRequest(OpCode.WRITE, local, (n + i) * block, seg, (n + i) * block, block)
        )
    batch = eng.allocate_batch(len(reqs))
    eng.submit(batch, reqs)
    statuses = eng.wait(batch, timeout=30)
    assert all(s.state is TransferState.COMPLETED for s in statuses), statuses[0]
    assert bytes(local.view()[: n * block]) == pattern(2 * n * block)[: n * block]
    assert target.sha256(n * block, n * block) == hashlib.sha256(data).hexdigest()


def test_concurrent_submitters_share_one_engine(start_target, make_engine):
    import threading

    nics = ("127.0.0.1", "127.0.0.2")
    target = start_target(size=16 * MiB, nics=nics)
    eng = make_engine(nics=nics)
    seg = eng.open_segment(target.name)
    expected = pattern(16 * MiB)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            local = eng.register_memory(bytearray(4 * MiB))
            for _ in range(5):
                batch = eng.allocate_batch(64)
                eng.submit(
                    batch,
                    [
                        TransferRequest(
                            OpCode.READ, local, i * 65536, seg, t * 4 * MiB + i * 65536, 65536
                        )
                        for i in range(64)
                    ],
                )
                assert all(s.state is TransferState.COMPLETED for s in eng.wait(batch, 30))
                eng.free_batch(batch)
                assert bytes(local.view()) == expected[t * 4 * MiB : (t + 1) * 4 * MiB]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors, errors


def test_edges_zero_length_and_exact_end(start_target, make_engine):
    target = start_target(size=MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(MiB))
    batch = eng.allocate_batch(3)
    eng.submit(
        batch,
        [
            TransferRequest(OpCode.READ, local, 0, seg, MiB, 0),  # empty, at the very end
            TransferRequest(OpCode.READ, local, MiB - 1, seg, MiB - 1, 1),  # last byte
            TransferRequest(OpCode.WRITE, local, 0, seg, 0, 0),
        ],
    )
    statuses = eng.wait(batch, timeout=30)
    assert [s.state for s in statuses] == [TransferState.COMPLETED] * 3
    assert [s.transferred for s in statuses] == [0, 1, 0]
    assert bytes(local.view()[MiB - 1 :]) == pattern(MiB)[MiB - 1 :]
    eng.free_batch(batch)
    with pytest.raises(TransferError, match="capacity must be"):
        eng.allocate_batch(0)
    with pytest.raises(TransferError, match="no request 7"):
        eng.status(batch, 7)


def _endpoint_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("mc-ep-")]


def test_a_lone_small_request_runs_in_the_submitting_thread(start_target, make_engine):
    # 4 KiB on an idle endpoint: no connection thread is started (the hand-off to one
    # and back cost ~35 us of a ~140 us read); bytes and counters are as on the queue.
    target = start_target(size=1 * MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(64 * 1024))
    before = set(_endpoint_threads())
    for i in range(20):
        eng.read(local, 0, seg, i * 4096, 4096)
        assert bytes(local.view()[:4096]) == pattern(1 * MiB)[i * 4096 : (i + 1) * 4096]
    data = bytes(range(256)) * 16
    local.view()[:4096] = data
    eng.write(local, 0, seg, 8192, 4096)
    assert target.sha256(8192, 4096) == hashlib.sha256(data).hexdigest()
    assert set(_endpoint_threads()) == before
    snap = eng.snapshot()
    assert snap.nic("127.0.0.1").bytes_received == 20 * 4096
    assert snap.nic("127.0.0.1").bytes_sent == 4096


def test_a_request_from_an_event_loop_goes_through_the_queue(start_target, make_engine):
    # An event loop's thread never does the I/O itself: a stalled peer would stall
    # every task of the loop for the I/O timeout.
    import asyncio

    target = start_target(size=1 * MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(4096))
    before = set(_endpoint_threads())

    async def submit() -> None:
        batch = eng.allocate_batch(1)
        eng.submit(batch, [TransferRequest(OpCode.READ, local, 0, seg, 0, 4096)])
        (st,) = await asyncio.to_thread(eng.wait, batch, 30)
        assert st.state is TransferState.COMPLETED
        eng.free_batch(batch)

    asyncio.run(submit())
    assert bytes(local.view()) == pattern(4096)
    assert set(_endpoint_threads()) - before, "the request did not use a connection thread"


def test_an_inline_request_to_a_dead_target_fails_with_its_reason(start_target, make_engine):
    target = start_target(size=1 * MiB)
    eng = make_engine(config={"request_timeout_s": 2.0, "max_retries": 1})
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(4096))
    eng.read(local, 0, seg, 0, 4096)  # the inline connection is open and idle now
    target.kill()
    with pytest.raises(TransferError, match="failed"):
        eng.read(local, 0, seg, 0, 4096)


def test_the_first_large_request_of_an_endpoint_uses_every_connection(start_target, make_engine):
    # The endpoint's connection threads start with its first request: were its slices
    # shared among the threads already waiting, the first to run would take them all
    # (a short-lived client's one large get would move over one connection).
    target = start_target(size=8 * MiB)
    eng = make_engine(config={"connections_per_endpoint": 3})
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(6 * MiB))
    eng.read(local, 0, seg, 0, 6 * MiB)
    assert bytes(local.view()) == pattern(8 * MiB)[: 6 * MiB]
    assert target.snapshot()["nics"][0]["connections"] == 3
    # Below FRESH_SHARE_MIN (4 MiB) a second connection's setup costs more than it
    # saves: a first 1 MiB read stays on the first connection to start.
    small = make_engine(config={"connections_per_endpoint": 3})
    small.read(small.register_memory(bytearray(MiB)), 0, small.open_segment(target.name), 0, MiB)
    assert target.snapshot()["nics"][0]["connections"] == 3 + 1


def test_a_lone_large_request_keeps_every_connection_busy(start_target, make_engine):
    # One 1 MiB request (no larger than a slice) is cut in as many slices as the
    # endpoint has connections (one connection alone moved it ~30% slower); requests
    # submitted together are not cut: they already keep the connections busy.
    target = start_target(size=8 * MiB)
    eng = make_engine(config={"connections_per_endpoint": 3})
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(2 * MiB))
    eng.read(local, 0, seg, MiB, MiB)
    assert bytes(local.view()[:MiB]) == pattern(8 * MiB)[MiB : 2 * MiB]
    assert eng.snapshot().nic("127.0.0.1").slices_received == 3
    data = bytes(reversed(pattern(MiB)))
    local.view()[:MiB] = data
    eng.write(local, 0, seg, 4 * MiB + 5, MiB)
    assert target.sha256(4 * MiB + 5, MiB) == hashlib.sha256(data).hexdigest()
    assert eng.snapshot().nic("127.0.0.1").slices_sent == 3

    batch = eng.allocate_batch(2)
    eng.submit(
        batch,
        [
            TransferRequest(OpCode.READ, local, 0, seg, 0, MiB),
            TransferRequest(OpCode.READ, local, MiB, seg, MiB, MiB),
        ],
    )
    assert all(st.state is TransferState.COMPLETED for st in eng.wait(batch, 30))
    eng.free_batch(batch)
    assert bytes(local.view()) == pattern(2 * MiB)
    assert eng.snapshot().nic("127.0.0.1").slices_received == 3 + 2
