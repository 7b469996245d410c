"""The rdma data path on a real device: two engines in one process over one HCA.

Runs only where ``/sys/class/infiniband`` lists a device and pyverbs imports (an RDMA
NIC, or soft-RoCE: ``rdma link add rxe0 type rxe netdev eth0``). Everywhere else it is
skipped, saying which of the two is missing: the reference machines have neither, so
this test has never run in this project's CI.
"""

import os

import pytest

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import OpCode, TransferEngine, TransferRequest, TransferState
from mooncake_core.transfer.rdma import probe, refusal

_support = probe()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not _support.usable,
        reason=f"rdma data path not exercised here: {refusal(_support)}",
    ),
]


@pytest.fixture
def pair():
    cfg = TransferConfig(protocol="rdma", request_timeout_s=20.0)
    target = TransferEngine(cfg, host_id="rdma-target").start()
    initiator = TransferEngine(cfg, host_id="rdma-initiator").start()
    try:
        yield target, initiator
    finally:
        initiator.close()
        target.close()


def test_rdma_loopback_roundtrip(pair):
    target, eng = pair
    size = 8 << 20
    remote = target.register_memory(bytearray(size), name="seg")
    local = eng.register_memory(bytearray(size))
    seg = eng.open_segment(f"{target.segment_name}/seg")
    assert seg.transport == "rdma"

    n = (3 << 20) + 123  # several slices, odd tail
    payload = os.urandom(n)
    local.view()[:n] = payload
    eng.write(local, 0, seg, 4096, n)
    assert bytes(remote.view()[4096 : 4096 + n]) == payload

    eng.read(local, 4 << 20, seg, 4096, n)
    assert bytes(local.view()[4 << 20 : (4 << 20) + n]) == payload

    # A batch bigger than the posting window, READs and WRITEs on disjoint ranges.
    remote.view()[: 1 << 20] = os.urandom(1 << 20)
    batch = eng.allocate_batch(512)
    reqs = [TransferRequest(OpCode.READ, local, i * 4096, seg, i * 4096, 4096) for i in range(256)]
    reqs += [
        TransferRequest(OpCode.WRITE, local, i * 4096, seg, (2 << 20) + i * 4096, 4096)
        for i in range(256, 512)
    ]
    eng.submit(batch, reqs)
    statuses = eng.wait(batch, timeout=30)
    assert all(s.state is TransferState.COMPLETED for s in statuses), statuses[:3]
    eng.free_batch(batch)
    assert bytes(local.view()[: 1 << 20]) == bytes(remote.view()[: 1 << 20])
    assert bytes(remote.view()[2 << 20 : 3 << 20]) == bytes(local.view()[1 << 20 : 2 << 20])

    snap = eng.snapshot()
    assert snap.transport("rdma").bytes == 2 * n + (2 << 20)
    assert snap.transport("rdma").requests_failed == 0
    assert snap.transport("tcp").bytes == 0  # nothing fell back


def test_rdma_refused_after_unregister(pair):
    target, eng = pair
    remote = target.register_memory(bytearray(1 << 20), name="gone")
    local = eng.register_memory(bytearray(1 << 20))
    seg = eng.open_segment(f"{target.segment_name}/gone")
    eng.write(local, 0, seg, 0, 4096)
    target.unregister_memory(remote)  # its memory region is deregistered: the rkey dies
    batch = eng.allocate_batch(1)
    eng.submit(batch, [TransferRequest(OpCode.WRITE, local, 0, seg, 0, 4096)])
    (status,) = eng.wait(batch, timeout=30)
    assert status.state is TransferState.FAILED
    assert status.reason is not None and "IBV_WC_REM_ACCESS_ERR" in status.reason
