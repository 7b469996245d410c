"""pyverbs layer: one opened device, memory regions and RC queue pairs.

Written against the pyverbs API of rdma-core v59.0 (PyPI ``pyverbs`` 59.0), whose
``libibverbs_enums`` exposes enum classes; the flat ``pyverbs.enums`` constants of
older releases (Debian's 44.0) are looked up as a fallback. **Never run on hardware in
this project's CI**: see docs/transfer.md, "RDMA", for how to run the device test.

Import this module only after ``rdma.probe()`` said pyverbs imports: it imports
pyverbs at module level.

Memory: regions are registered in place, ``MR(pd, length, access, address=addr)``
(pyverbs registers user memory when ``address`` is given, since rdma-core v28), so
every buffer the engine accepts (bytearray, numpy, torch, shm) can be an RDMA source or
target; no bounce buffer and no special allocator.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

from .rdma import RdmaOptions
from .rdma_info import KIND_REPLY, RdmaInfo, SegmentKey, gid_bytes, gid_text
from .rdma_window import Completion
from .request import TransferError

try:  # rdma-core >= 45: enum classes
    import pyverbs.libibverbs_enums as _enums
except ImportError:  # older releases: flat constants
    import pyverbs.enums as _enums

log = logging.getLogger(__name__)

# Same values as rdma-core's own RC tests and ibv_rc_pingpong.
MIN_RNR_TIMER = 12
TIMEOUT = 14
RETRY_CNT = 7
RNR_RETRY = 7
MAX_RD_ATOMIC = 16


def _const(enum_name: str, member: str) -> int:
    holder = getattr(_enums, enum_name, None)
    value = getattr(holder, member, None) if holder is not None else None
    if value is None:
        value = getattr(_enums, member)
    return int(value)


ACCESS = (
    _const("ibv_access_flags", "IBV_ACCESS_LOCAL_WRITE")
    | _const("ibv_access_flags", "IBV_ACCESS_REMOTE_READ")
    | _const("ibv_access_flags", "IBV_ACCESS_REMOTE_WRITE")
)
WR_RDMA_WRITE = _const("ibv_wr_opcode", "IBV_WR_RDMA_WRITE")
WR_RDMA_READ = _const("ibv_wr_opcode", "IBV_WR_RDMA_READ")
SEND_SIGNALED = _const("ibv_send_flags", "IBV_SEND_SIGNALED")
QPT_RC = _const("ibv_qp_type", "IBV_QPT_RC")
PORT_ACTIVE = _const("ibv_port_state", "IBV_PORT_ACTIVE")
LINK_LAYER_ETHERNET = _const("", "IBV_LINK_LAYER_ETHERNET")
GID_TYPE_ROCE_V2 = _const("ibv_gid_type_sysfs", "IBV_GID_TYPE_SYSFS_ROCE_V2")


class RdmaDevice:
    """An opened device and port: context, protection domain, port facts, GID.

    Use :meth:`open`; ``close()`` releases everything created from it (pyverbs closes
    a context's children with it).
    """

    def __init__(self, ctx: Any, name: str, options: RdmaOptions, port_attr: Any) -> None:
        self.ctx = ctx
        self.name = name
        self.port = options.port
        self.pd = PD(ctx)
        dev_attr = ctx.query_device()
        self.lid = int(port_attr.lid)
        self.active_mtu = int(port_attr.active_mtu)
        self.max_msg_size = int(port_attr.max_msg_sz)
        self.is_ethernet = int(port_attr.link_layer) == LINK_LAYER_ETHERNET
        self.max_qp_wr = int(dev_attr.max_qp_wr)
        self.max_cqe = int(dev_attr.max_cqe)
        # As requester we may have this many READs in flight; as responder we accept this many.
        self.max_rd_atomic = max(1, min(MAX_RD_ATOMIC, int(dev_attr.max_qp_init_rd_atom)))
        self.max_dest_rd_atomic = max(1, min(MAX_RD_ATOMIC, int(dev_attr.max_qp_rd_atom)))
        self.gid_index = (
            options.gid_index
            if options.gid_index is not None
            else self._pick_gid_index(int(port_attr.gid_tbl_len))
        )
        self.gid = gid_bytes(str(ctx.query_gid(self.port, self.gid_index)))

    @classmethod
    def open(cls, options: RdmaOptions, devices: Sequence[str]) -> RdmaDevice:
        """Open the configured device, or the first one whose port is ACTIVE.

        Raises:
            TransferError: None could be opened (each device's error is named).
        """
        names = [options.device] if options.device else list(devices)
        errors: list[str] = []
        for name in names:
            try:
                ctx = Context(name=name)
            except PyverbsError as exc:
                errors.append(f"{name}: {exc}")
                continue
            try:
                port_attr = ctx.query_port(options.port)
                if int(port_attr.state) != PORT_ACTIVE:
                    errors.append(f"{name}: port {options.port} is not ACTIVE")
                    ctx.close()
                    continue
                return cls(ctx, name, options, port_attr)
            except (PyverbsError, TransferError, ValueError) as exc:
                errors.append(f"{name}: {exc}")
                ctx.close()
        raise TransferError(f"no usable RDMA device among {names}: {'; '.join(errors)}")

    def _pick_gid_index(self, table_len: int) -> int:
        """0 on InfiniBand; on RoCE the first IPv4-mapped RoCE v2 GID, else any v2 GID."""
        if not self.is_ethernet:
            return 0
        v2: list[int] = []
        for i in range(table_len):
            try:
                if int(self.ctx.query_gid_type(self.port, i)) != GID_TYPE_ROCE_V2:
                    continue
                gid = gid_bytes(str(self.ctx.query_gid(self.port, i)))
            except PyverbsError:
                continue  # empty table slots fail to query
            if not any(gid):
                continue
            if gid[:12] == b"\0" * 10 + b"\xff\xff":
                return i
            v2.append(i)
        if not v2:
            raise TransferError(f"{self.name} port {self.port}: no RoCE v2 GID configured")
        return v2[0]

    def register(self, address: int, length: int) -> Any:
        """Register ``length`` bytes at ``address`` for local and remote read/write.

        Raises:
            TransferError: The device refused (often RLIMIT_MEMLOCK; see ``ulimit -l``).
        """
        try:
            return MR(self.pd, length, ACCESS, address=address)
        except PyverbsError as exc:
            raise TransferError(
                f"{self.name}: cannot register {length} bytes at {address:#x}: {exc} "
                "(check `ulimit -l`)"
            ) from exc

    def queue_pair(self, depth: int) -> RcQueuePair:
        """A new RC queue pair in INIT with its own CQ, ``depth`` work requests deep."""
        depth = max(1, min(depth, self.max_qp_wr, self.max_cqe))
        return RcQueuePair(self, depth)

    def close(self) -> None:
        """Close the context and everything created from it."""
        try:
            self.ctx.close()
        except PyverbsError as exc:
            log.warning("closing RDMA device %s: %s", self.name, exc)


class RcQueuePair:
    """One reliable-connected queue pair and its completion queue."""

    def __init__(self, dev: RdmaDevice, depth: int) -> None:
        self.dev = dev
        self.depth = depth
        self.cq = CQ(dev.ctx, depth, None, None, 0)
        cap = QPCap(max_send_wr=depth, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=1)
        attr = QPAttr(port_num=dev.port)
        attr.qp_access_flags = ACCESS
        try:
            self.qp = QP(dev.pd, init, attr)  # an RC QP given a QPAttr stops in INIT
        except PyverbsError:
            self.cq.close()
            raise
        self.psn = random.getrandbits(24)

    @property
    def qp_num(self) -> int:
        """This queue pair's number."""
        return int(self.qp.qp_num)

    def info(self, kind: int, segments: Sequence[SegmentKey] = ()) -> RdmaInfo:
        """The block that tells the peer how to reach this queue pair."""
        dev = self.dev
        return RdmaInfo(
            kind,
            self.qp_num,
            self.psn,
            dev.lid,
            dev.port,
            dev.active_mtu,
            dev.max_dest_rd_atomic,
            dev.gid,
            tuple(segments),
        )

    def connect(self, peer: RdmaInfo) -> None:
        """Move INIT -> RTR -> RTS towards the peer's queue pair.

        Raises:
            PyverbsError: The device refused a transition.
        """
        self.qp.to_rts(rts_attr(self.dev, peer, self.psn))

    def post(
        self,
        wr_id: int,
        write: bool,
        local_addr: int,
        length: int,
        lkey: int,
        remote_addr: int,
        rkey: int,
    ) -> None:
        """Post one signalled RDMA WRITE (local -> remote) or READ (remote -> local).

        Raises:
            PyverbsError: ``ibv_post_send`` refused it.
        """
        wr = rdma_wr(wr_id, write, local_addr, length, lkey, remote_addr, rkey)
        self.qp.post_send(wr)

    def poll(self, n: int) -> list[Completion]:
        """Up to ``n`` completions, without blocking."""
        _, wcs = self.cq.poll(n)
        return [Completion(int(w.wr_id), int(w.status), int(w.vendor_err)) for w in wcs]

    def close(self) -> None:
        """Destroy the queue pair and its CQ (the HCA stops touching memory for it)."""
        for obj in (self.qp, self.cq):
            try:
                obj.close()
            except PyverbsError as exc:
                log.warning("closing RDMA queue pair on %s: %s", self.dev.name, exc)


def rts_attr(dev: Any, peer: RdmaInfo, psn: int) -> Any:
    """The ``QPAttr`` that takes an RC queue pair to RTS towards ``peer``.

    Args:
        dev: The local ``RdmaDevice`` (port, active_mtu, gid_index, is_ethernet,
            max_rd_atomic, max_dest_rd_atomic are read).
        peer: The peer's info block.
        psn: The first PSN this side sends with.
    """
    attr = QPAttr(port_num=dev.port)
    attr.qp_access_flags = ACCESS
    attr.path_mtu = min(dev.active_mtu, peer.mtu)
    attr.dest_qp_num = peer.qp_num
    attr.rq_psn = peer.psn
    attr.sq_psn = psn
    attr.max_dest_rd_atomic = dev.max_dest_rd_atomic
    attr.max_rd_atomic = min(dev.max_rd_atomic, peer.max_rd_atomic)
    attr.min_rnr_timer = MIN_RNR_TIMER
    attr.timeout = TIMEOUT
    attr.retry_cnt = RETRY_CNT
    attr.rnr_retry = RNR_RETRY
    if dev.is_ethernet or any(peer.gid):
        # RoCE always routes by GID; InfiniBand uses it when the peer sent one.
        gr = GlobalRoute(dgid=GID(gid_text(peer.gid)), sgid_index=dev.gid_index)
        attr.ah_attr = AHAttr(port_num=dev.port, is_global=1, gr=gr, dlid=peer.lid)
    else:
        attr.ah_attr = AHAttr(port_num=dev.port, is_global=0, dlid=peer.lid)
    return attr


def rdma_wr(
    wr_id: int, write: bool, local_addr: int, length: int, lkey: int, remote_addr: int, rkey: int
) -> Any:
    """A signalled RDMA WRITE or READ work request with one scatter/gather entry."""
    sge = SGE(local_addr, length, lkey)  # SendWR copies the entry into its own list
    wr = SendWR(
        wr_id=wr_id,
        opcode=WR_RDMA_WRITE if write else WR_RDMA_READ,
        num_sge=1,
        sg=[sge],
        send_flags=SEND_SIGNALED,
    )
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def reply_info(qp: RcQueuePair, keys: Sequence[SegmentKey]) -> RdmaInfo:
    """The REPLY block of a target-side queue pair."""
    return qp.info(KIND_REPLY, keys)
