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
