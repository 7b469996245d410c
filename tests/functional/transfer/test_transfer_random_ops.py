"""Random READ/WRITE batches against a model of the target segment (tcp, 3 NICs, small slices)."""

from __future__ import annotations

import hashlib
import random

import pytest
from transfer_target_proc import pattern

from mooncake_core.transfer import OpCode, TransferRequest, TransferState

pytestmark = pytest.mark.integration

SIZE = 8 << 20


@pytest.mark.parametrize("shm", [False, True], ids=["tcp", "shm"])
def test_random_batches_match_a_model(shm, start_target, make_engine):
    nics = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    target = start_target(size=SIZE, nics=nics, shm=shm)
    eng = make_engine(nics=nics, config={"slice_size": 16384})
    seg = eng.open_segment(target.name)
    assert seg.transport == ("shm" if shm else "tcp")
    model = bytearray(pattern(SIZE))
    local = eng.register_memory(bytearray(SIZE))
    view = local.view()
    rng = random.Random(1234)
    for _ in range(6):
        # Requests of one batch touch disjoint target ranges and disjoint local ranges,
        # so the outcome does not depend on the order slices land in.
        cuts = sorted(rng.sample(range(1, SIZE // 4096), 24))
        spans = [(a * 4096, b * 4096) for a, b in zip(cuts[::2], cuts[1::2], strict=True)]
        reqs, expect = [], []
        for lo, hi in spans:
            start = rng.randrange(lo, hi)
            length = rng.randrange(1, hi - start + 1)
            op = rng.choice([OpCode.READ, OpCode.WRITE])
            if op == OpCode.WRITE:
                data = rng.randbytes(length)
                view[start : start + length] = data
                model[start : start + length] = data
            reqs.append(TransferRequest(op, local, start, seg, start, length))
            expect.append((op, start, length))
        batch = eng.allocate_batch(len(reqs))
        eng.submit(batch, reqs)
        assert all(s.state is TransferState.COMPLETED for s in eng.wait(batch, timeout=30))
        eng.free_batch(batch)
        for op, start, length in expect:
            if op == OpCode.READ:
                assert bytes(view[start : start + length]) == bytes(model[start : start + length])
    assert target.sha256(0, SIZE) == hashlib.sha256(model).hexdigest()
