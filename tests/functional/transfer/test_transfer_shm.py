"""shm transport between two real processes on one host."""

from __future__ import annotations

import hashlib

import pytest
from transfer_target_proc import pattern

from mooncake_core.transfer import OpCode, TransferError, TransferRequest, TransferState

pytestmark = pytest.mark.integration

MiB = 1 << 20


def test_auto_picks_shm_and_moves_data(start_target, make_engine):
    target = start_target(size=8 * MiB, shm=True)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    assert seg.transport == "shm"
    assert seg.info.shm_path is not None and seg.info.shm_path.startswith("/dev/shm/")
    local = eng.register_memory(bytearray(8 * MiB))
    batch = eng.allocate_batch(8)
    eng.submit(
        batch, [TransferRequest(OpCode.READ, local, i * MiB, seg, i * MiB, MiB) for i in range(8)]
    )
    assert all(s.state is TransferState.COMPLETED for s in eng.wait(batch, timeout=30))
    eng.free_batch(batch)
    assert bytes(local.view()) == pattern(8 * MiB)

    data = pattern(5 * MiB + 3, seed=7)
    local.view()[: len(data)] = data
    eng.write(local, 0, seg, 4096, len(data))
    assert target.sha256(4096, len(data)) == hashlib.sha256(data).hexdigest()
    snap = eng.snapshot()
    assert snap.transport("shm").bytes == 8 * MiB + len(data)
    assert snap.transport("tcp").bytes == 0


def test_other_host_id_uses_tcp(start_target, make_engine):
    target = start_target(size=MiB, shm=True, host_id="some-other-host")
    eng = make_engine()
    seg = eng.open_segment(target.name)
    assert seg.transport == "tcp"
    local = eng.register_memory(bytearray(MiB))
    eng.read(local, 0, seg, 0, MiB)
    assert bytes(local.view()) == pattern(MiB)


def test_shm_refused_for_a_plain_buffer_segment(start_target, make_engine):
    target = start_target(size=MiB, shm=False)
    eng = make_engine(config={"protocol": "shm"})
    with pytest.raises(TransferError, match="not shm-backed"):
        eng.open_segment(target.name)
    auto = make_engine()
    assert auto.open_segment(target.name).transport == "tcp"


def test_shm_segment_in_the_same_process(make_engine):
    owner = make_engine()
    region = owner.allocate_memory(2 * MiB, name="local-seg")
    region.view()[:] = pattern(2 * MiB, seed=3)
    eng = make_engine()
    seg = eng.open_segment(f"{owner.segment_name}/local-seg")
    assert seg.transport == "shm"
    local = eng.register_memory(bytearray(2 * MiB))
    eng.read(local, 0, seg, 0, 2 * MiB)
    assert bytes(local.view()) == pattern(2 * MiB, seed=3)
    path = region.shm_path
    owner.unregister_memory(region)
    import os

    assert path is not None and not os.path.exists(path)


def test_small_shm_batches_are_copied_before_submit_returns(start_target, make_engine):
    """At most ``INLINE_MAX`` bytes are copied in the submitting thread (a hand-off to the
    copy thread costs more than the copy); a larger batch runs on the copy thread. Both
    move the same bytes and count them the same way."""
    from mooncake_core.transfer.shm import INLINE_MAX

    target = start_target(size=4 * MiB, shm=True)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(4 * MiB))
    small = [TransferRequest(OpCode.READ, local, i * 4096, seg, i * 4096, 4096) for i in range(64)]
    assert INLINE_MAX >= 64 * 4096
    batch = eng.allocate_batch(64)
    eng.submit(batch, small)
    # no wait(): every request is already done, in this thread
    assert [s.state for s in eng.batch_status(batch)] == [TransferState.COMPLETED] * 64
    eng.free_batch(batch)
    assert bytes(local.view()[: 64 * 4096]) == pattern(4 * MiB)[: 64 * 4096]
    big = eng.allocate_batch(1)
    eng.submit(big, [TransferRequest(OpCode.READ, local, 0, seg, 0, 4 * MiB)])
    assert eng.wait(big, timeout=30)[0].state is TransferState.COMPLETED
    eng.free_batch(big)
    assert bytes(local.view()) == pattern(4 * MiB)
    assert eng.snapshot().transport("shm").bytes == 64 * 4096 + 4 * MiB


def test_run_now_copies_small_shm_requests_without_a_batch(start_target, make_engine):
    """``run_now`` does small shm requests in the caller's thread: the same bytes, checks
    and counters as a batch. Anything it cannot do at once (not shm, too large) it
    leaves untouched and says so; an invalid request is refused before any copy."""
    from mooncake_core.transfer.shm import INLINE_MAX, served

    target = start_target(size=4 * MiB, shm=True)
    tcp_target = start_target(size=MiB, shm=True, host_id="some-other-host")
    eng = make_engine()
    seg = eng.open_segment(target.name)
    far = eng.open_segment(tcp_target.name)
    assert (seg.transport, far.transport) == ("shm", "tcp")
    local = eng.register_memory(bytearray(4 * MiB))
    reads = [TransferRequest(OpCode.READ, local, i * 4096, seg, i * 4096, 4096) for i in range(4)]
    assert eng.run_now(reads) is True
    assert bytes(local.view()[: 4 * 4096]) == pattern(4 * MiB)[: 4 * 4096]
    data = pattern(8192, seed=11)
    local.view()[MiB : MiB + 8192] = data
    assert eng.run_now([TransferRequest(OpCode.WRITE, local, MiB, seg, 3 * MiB, 8192)])
    assert target.sha256(3 * MiB, 8192) == hashlib.sha256(data).hexdigest()
    shm = eng.snapshot().transport("shm")
    assert (shm.bytes, shm.requests_completed) == (4 * 4096 + 8192, 5)
    # The target's ledger counts every request, not one per call.
    assert served(seg.info.shm_path) == (4 * 4096 + 8192, 5)
    # Not done at once (False, nothing moved): a tcp segment, or more than INLINE_MAX.
    local.view()[:] = bytes(4 * MiB)
    assert eng.run_now([TransferRequest(OpCode.READ, local, 0, far, 0, 4096)]) is False
    too_big = INLINE_MAX + 1
    assert eng.run_now([TransferRequest(OpCode.READ, local, 0, seg, 0, too_big)]) is False
    assert bytes(local.view()) == bytes(4 * MiB)
    # An invalid request refuses the whole call before anything is copied.
    bad = [
        TransferRequest(OpCode.READ, local, 0, seg, 0, 4096),
        TransferRequest(OpCode.READ, local, 0, seg, 4 * MiB - 100, 4096),
    ]
    with pytest.raises(TransferError, match="outside segment"):
        eng.run_now(bad)
    assert bytes(local.view()) == bytes(4 * MiB)
    assert eng.snapshot().transport("shm").bytes == 4 * 4096 + 8192
