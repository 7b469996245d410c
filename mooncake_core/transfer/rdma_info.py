"""RDMA connection info block: what two engines exchange to connect RC queue pairs (sans-IO).

The block travels inside the existing authenticated control connection: the initiator
sends a LOOKUP frame with ``FLAG_RDMA`` set whose payload is a REQUEST block, the target
answers LOOKUP_RESP with ``FLAG_RDMA`` and a REPLY block (or ERROR). Servers that do not
speak rdma treat the payload as an unknown segment name and answer ERROR, so the
initiator falls back to tcp.

::

    offset size field          meaning
    0      4    magic          b"MCRD"
    4      1    version        1
    5      1    kind           1 = REQUEST (initiator -> target), 2 = REPLY
    6      2    n_segments     entries that follow the fixed part (<= MAX_SEGMENTS)
    8      4    qp_num         24-bit queue pair number of the sender's RC QP
    12     4    psn            24-bit first packet sequence number the sender sends with
    16     2    lid            port LID (InfiniBand; 0 on RoCE)
    18     1    port           port number on the sender's device (>= 1)
    19     1    mtu            active path MTU as ibv_mtu (1 = 256 ... 5 = 4096)
    20     1    max_rd_atomic  RDMA READs the sender accepts in flight as responder
    21     3    reserved       zero (a version 1 decoder refuses anything else)
    24     16   gid            port GID (RoCE needs it; IB may send zeros)
    40     24*n segments       segment_id u32, rkey u32, addr u64, length u64

REQUEST entries name the segments wanted (rkey, addr, length zero); REPLY entries carry
the memory key and the base address of each. All integers little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"MCRD"
VERSION = 1
KIND_REQUEST = 1
KIND_REPLY = 2
FLAG_RDMA = 1 << 1
"""LOOKUP/LOOKUP_RESP header flag: the payload is an info block, not a segment name."""
MAX_SEGMENTS = 256
GID_SIZE = 16

_FIXED = struct.Struct("<4sBBHIIHBBB3s16s")
_ENTRY = struct.Struct("<IIQQ")
FIXED_SIZE = _FIXED.size
ENTRY_SIZE = _ENTRY.size
_U24 = 1 << 24
_U64 = 1 << 64


class RdmaInfoError(ValueError):
    """Bytes or values that are not a valid RDMA info block."""


@dataclass(frozen=True, slots=True)
class SegmentKey:
    """How to reach one remote segment with one-sided verbs.

    Attributes:
        segment_id: Id the target knows the segment by (from LOOKUP).
        rkey: Remote key of the memory region covering it (0 in requests).
        addr: Virtual address of its first byte on the target (0 in requests).
        length: Bytes covered by ``rkey`` (0 in requests).
    """

    segment_id: int
    rkey: int = 0
    addr: int = 0
    length: int = 0


@dataclass(frozen=True, slots=True)
class RdmaInfo:
    """One side's RC queue pair coordinates plus segment keys.

    Attributes:
        kind: ``KIND_REQUEST`` or ``KIND_REPLY``.
        qp_num: Queue pair number (24 bits).
        psn: First packet sequence number this side sends with (24 bits).
        lid: Port LID (0 on RoCE).
        port: Port number (1-255).
        mtu: Active MTU as an ``ibv_mtu`` value (1-5).
        max_rd_atomic: Outstanding RDMA READs this side serves as responder (1-255).
        gid: 16-byte port GID.
        segments: Requested segments (REQUEST) or their keys (REPLY).
    """

    kind: int
    qp_num: int
    psn: int
    lid: int
    port: int
    mtu: int
    max_rd_atomic: int
    gid: bytes
    segments: tuple[SegmentKey, ...] = ()

    def __post_init__(self) -> None:
        _check(self)

    def encode(self) -> bytes:
        """The wire bytes of this block."""
        head = _FIXED.pack(
            MAGIC,
            VERSION,
            self.kind,
            len(self.segments),
            self.qp_num,
            self.psn,
            self.lid,
            self.port,
            self.mtu,
            self.max_rd_atomic,
            b"\0\0\0",
            self.gid,
        )
        return head + b"".join(
            _ENTRY.pack(s.segment_id, s.rkey, s.addr, s.length) for s in self.segments
        )

    def key_for(self, segment_id: int) -> SegmentKey | None:
        """The entry for ``segment_id``, or None when the block has none."""
        for s in self.segments:
            if s.segment_id == segment_id:
                return s
        return None


def _check(info: RdmaInfo) -> None:
    if info.kind not in (KIND_REQUEST, KIND_REPLY):
        raise RdmaInfoError(f"kind must be 1 (request) or 2 (reply), got {info.kind}")
    if not 0 < info.qp_num < _U24:
        raise RdmaInfoError(f"qp_num {info.qp_num} outside 1..2^24-1")
    if not 0 <= info.psn < _U24:
        raise RdmaInfoError(f"psn {info.psn} outside 0..2^24-1")
    if not 0 <= info.lid < 1 << 16:
        raise RdmaInfoError(f"lid {info.lid} outside 0..65535")
    if not 1 <= info.port <= 255:
        raise RdmaInfoError(f"port {info.port} outside 1..255")
    if not 1 <= info.mtu <= 5:
        raise RdmaInfoError(f"mtu {info.mtu} is not an ibv_mtu (1..5)")
    if not 1 <= info.max_rd_atomic <= 255:
        raise RdmaInfoError(f"max_rd_atomic {info.max_rd_atomic} outside 1..255")
    if not isinstance(info.gid, bytes) or len(info.gid) != GID_SIZE:
        raise RdmaInfoError(f"gid must be {GID_SIZE} bytes, got {info.gid!r}")
    if len(info.segments) > MAX_SEGMENTS:
        raise RdmaInfoError(f"{len(info.segments)} segments, at most {MAX_SEGMENTS}")
    seen: set[int] = set()
    for s in info.segments:
        if not 0 < s.segment_id < 1 << 32 or s.segment_id in seen:
            raise RdmaInfoError(f"segment id {s.segment_id} is zero, too large or repeated")
        seen.add(s.segment_id)
        if info.kind == KIND_REQUEST:
            if s.rkey or s.addr or s.length:
                raise RdmaInfoError(f"request entry for segment {s.segment_id} carries keys")
            continue
        if not 0 <= s.rkey < 1 << 32:
            raise RdmaInfoError(f"rkey {s.rkey} of segment {s.segment_id} is not 32 bits")
        if s.addr <= 0 or s.length <= 0 or s.addr + s.length > _U64:
            raise RdmaInfoError(
                f"segment {s.segment_id}: address {s.addr:#x} + length {s.length} "
                "is empty or wraps past 2^64"
            )


def decode(data: bytes | bytearray | memoryview) -> RdmaInfo:
    """Decode and validate one block.

    Args:
        data: The whole payload (nothing may follow the last entry).

    Returns:
        The block.

    Raises:
        RdmaInfoError: Wrong magic, unsupported version, a size that does not match the
            entry count, or any field out of range.
    """
    raw = bytes(data)
    if len(raw) < FIXED_SIZE:
        raise RdmaInfoError(f"rdma info block needs {FIXED_SIZE} bytes, got {len(raw)}")
    (magic, version, kind, count, qp_num, psn, lid, port, mtu, rd_atomic, reserved, gid) = (
        _FIXED.unpack_from(raw)
    )
    if magic != MAGIC:
        raise RdmaInfoError(f"bad rdma info magic {magic!r}")
    if version != VERSION:
        raise RdmaInfoError(f"unsupported rdma info version {version} (this build speaks 1)")
    if reserved != b"\0\0\0":
        raise RdmaInfoError(f"reserved bytes must be zero in version 1, got {reserved.hex()}")
    if count > MAX_SEGMENTS:
        raise RdmaInfoError(f"{count} segments, at most {MAX_SEGMENTS}")
    want = FIXED_SIZE + count * ENTRY_SIZE
    if len(raw) != want:
        raise RdmaInfoError(f"rdma info block of {len(raw)} bytes, {count} entries need {want}")
    segments = tuple(
        SegmentKey(*_ENTRY.unpack_from(raw, FIXED_SIZE + i * ENTRY_SIZE)) for i in range(count)
    )
    return RdmaInfo(kind, qp_num, psn, lid, port, mtu, rd_atomic, gid, segments)


def mtu_bytes(mtu: int) -> int:
    """Bytes of an ``ibv_mtu`` value (1 -> 256 ... 5 -> 4096).

    Raises:
        RdmaInfoError: Not 1..5.
    """
    if not 1 <= mtu <= 5:
        raise RdmaInfoError(f"mtu {mtu} is not an ibv_mtu (1..5)")
    return 128 << mtu


def gid_text(gid: bytes) -> str:
    """A 16-byte GID in pyverbs' text form ``xxxx:xxxx:...`` (8 groups of 4 hex digits).

    Raises:
        RdmaInfoError: Not 16 bytes.
    """
    if len(gid) != GID_SIZE:
        raise RdmaInfoError(f"gid must be {GID_SIZE} bytes, got {len(gid)}")
    h = gid.hex()
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))


def gid_bytes(text: str) -> bytes:
    """Inverse of :func:`gid_text`.

    Raises:
        RdmaInfoError: Not 8 groups of 4 hex digits.
    """
    groups = text.split(":")
    if len(groups) != 8 or any(len(g) != 4 for g in groups):
        raise RdmaInfoError(f"bad gid text {text!r}")
    try:
        return bytes.fromhex("".join(groups))
    except ValueError:
        raise RdmaInfoError(f"bad gid text {text!r}") from None
