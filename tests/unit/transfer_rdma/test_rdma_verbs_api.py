"""Our use of the pyverbs API, checked against the installed pyverbs without a device.

Builds the real pyverbs objects the data path uses (QPAttr for RTS, the address vector,
SendWR with the RDMA segment, QPCap/QPInitAttr) and reads them back. Skipped where
pyverbs is not installed; it needs no device, so it is the one piece of the verbs layer
that can run on a machine without RDMA hardware.
"""

import types

import pytest

pytest.importorskip(
    "pyverbs.qp", reason="pyverbs is not installed (pip install 'mooncake-py[rdma]')"
)

from mooncake_core.transfer import rdma_verbs as rv
from mooncake_core.transfer.rdma import RdmaOptions, require_rdma
from mooncake_core.transfer.rdma_info import KIND_REPLY, RdmaInfo
from mooncake_core.transfer.request import TransferError

GID = bytes.fromhex("00000000000000000000ffff0a000002")


def dev(**kw):
    facts = dict(
        port=1,
        active_mtu=5,
        gid_index=3,
        is_ethernet=True,
        max_rd_atomic=16,
        max_dest_rd_atomic=8,
    )
    facts.update(kw)
    return types.SimpleNamespace(**facts)


def peer(**kw):
    fields = dict(
        kind=KIND_REPLY, qp_num=0x1234, psn=0x777, lid=9, port=1, mtu=3, max_rd_atomic=4, gid=GID
    )
    fields.update(kw)
    return RdmaInfo(**fields)


def test_constants_resolve():
    assert rv.ACCESS == 1 | 2 | 4  # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
    assert (rv.WR_RDMA_WRITE, rv.WR_RDMA_READ) == (0, 4)
    assert rv.SEND_SIGNALED == 2
    assert rv.QPT_RC == 2
    assert rv.PORT_ACTIVE == 4
    assert rv.LINK_LAYER_ETHERNET == 2
    assert rv.GID_TYPE_ROCE_V2 == 1


def test_rts_attr_roce():
    attr = rv.rts_attr(dev(), peer(), psn=0x4242)
    assert attr.port_num == 1
    assert attr.qp_access_flags == rv.ACCESS
    assert attr.path_mtu == 3  # min(local 4096, peer 1024)
    assert attr.dest_qp_num == 0x1234
    assert attr.rq_psn == 0x777 and attr.sq_psn == 0x4242
    assert attr.max_rd_atomic == 4  # what the peer accepts as responder
    assert attr.max_dest_rd_atomic == 8
    assert (attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry) == (12, 14, 7, 7)
    ah = attr.ah_attr
    assert ah.is_global == 1 and ah.port_num == 1 and ah.dlid == 9
    assert ah.sgid_index == 3
    assert ah.dgid == "0000:0000:0000:0000:0000:ffff:0a00:0002"


def test_rts_attr_infiniband_without_gid():
    attr = rv.rts_attr(dev(is_ethernet=False), peer(gid=bytes(16)), psn=1)
    assert attr.ah_attr.is_global == 0 and attr.ah_attr.dlid == 9


def test_rdma_work_request():
    wr = rv.rdma_wr(17, True, 0x1000, 4096, 0xAB, 0x7F00_0000_2000, 0xCD)
    assert wr.wr_id == 17 and wr.num_sge == 1
    assert wr.opcode == rv.WR_RDMA_WRITE and wr.send_flags == rv.SEND_SIGNALED
    assert rv.rdma_wr(18, False, 0x1000, 1, 1, 1, 1).opcode == rv.WR_RDMA_READ


def test_queue_pair_attrs_build():
    from pyverbs.qp import QPCap, QPInitAttr

    cap = QPCap(max_send_wr=64, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=rv.QPT_RC, cap=cap, sq_sig_all=1)
    assert init.qp_type == rv.QPT_RC and init.max_send_wr == 64 and init.sq_sig_all == 1


def test_opening_a_device_that_is_not_there_is_refused(tmp_path):
    (tmp_path / "mlx5_9").mkdir()  # sysfs says it exists; libibverbs does not know it
    with pytest.raises(TransferError, match="no usable RDMA device among \\['mlx5_9'\\]: mlx5_9: "):
        require_rdma(str(tmp_path), RdmaOptions())
