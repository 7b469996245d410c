"""Transfer Engine: the data plane that moves KV bytes between segments.

See docs/transfer.md for the architecture, wire protocol and failure handling.

Usage::

    from mooncake_core.transfer import TransferEngine, OpCode, TransferRequest

    with TransferEngine(cfg, nics=["127.0.0.1"]) as eng:
        region = eng.register_memory(bytearray(1 << 20))
        seg = eng.open_segment("127.0.0.1:40000/store-0")
        batch = eng.allocate_batch(8)
        eng.submit(batch, [TransferRequest(OpCode.READ, region, 0, seg, 0, 4096)])
        eng.wait(batch)
        eng.free_batch(batch)
"""

from .batch import Batch
from .directory import PeerDirectory, RemoteSegment, SegmentDirectory, SegmentInfo
from .engine import TransferEngine
from .handshake import AuthError
from .region import Region
from .request import OpCode, TransferError, TransferRequest, TransferState, TransferStatus
from .stats import NicStats, TransferSnapshot, TransportStats

__all__ = [
    "AuthError",
    "Batch",
    "NicStats",
    "OpCode",
    "PeerDirectory",
    "Region",
    "RemoteSegment",
    "SegmentDirectory",
    "SegmentInfo",
    "TransferEngine",
    "TransferError",
    "TransferRequest",
    "TransferSnapshot",
    "TransferState",
    "TransferStatus",
    "TransportStats",
]
