"""Wire protocol of the tcp transport: a fixed 40-byte header, then an optional payload.

Sans-IO: encoding, decoding and an incremental :class:`FrameDecoder`; the sockets live
in ``server.py`` / ``handshake.py`` and the byte-moving loops in ``native/mc_native.c``,
which parses the same header (kept equal by tests).

::

    offset size field       meaning
    0      4    magic       b"MCTE"
    4      1    version     1
    5      1    op          Op below
    6      2    flags       HELLO: bit 0 = authentication required
    8      4    segment     segment id (from LOOKUP)
    12     4    status      Status below (responses)
    16     8    request_id  echoed by the response
    24     8    offset      byte offset in the segment
    32     8    length      payload bytes that follow (READ: bytes wanted)

All integers little-endian.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

MAGIC = b"MCTE"
VERSION = 1
HEADER = struct.Struct("<4sBBHIIQQQ")
HEADER_SIZE = HEADER.size
MAX_DATA_LENGTH = 1 << 31
"""Data frames announcing more than this are malformed (the C server uses the same bound)."""
MAX_CONTROL_LENGTH = 1 << 16
"""Handshake/lookup payloads are small; more than this is malformed."""
FLAG_AUTH_REQUIRED = 1

SLICE = struct.Struct("<IIQQQQ")
"""One slice for ``_native.transfer``: op, segment, request id, remote offset, local address, length."""
COPY_JOB = struct.Struct("<QQQ")
"""One copy for ``_native.copy_many``: destination address, source address, length."""

# Slots of the u64 counters the C server loop updates (its C_* enum, server's view).
SERVER_SLOTS = {
    "bytes_received": 0,
    "bytes_sent": 1,
    "slices_received": 2,
    "slices_sent": 3,
    "malformed_frames": 4,
    "bounds_errors": 5,
    "unknown_segments": 6,
}


class Op(enum.IntEnum):
    """Frame types. 1-4 travel on data connections, 16+ during the handshake."""

    READ = 1
    WRITE = 2
    READ_RESP = 3
    WRITE_ACK = 4
    HELLO = 16
    AUTH = 17
    AUTH_OK = 18
    LOOKUP = 19
    LOOKUP_RESP = 20
    START_DATA = 21
    ERROR = 22


DATA_OPS = frozenset({Op.READ, Op.WRITE, Op.READ_RESP, Op.WRITE_ACK})


class Status(enum.IntEnum):
    """Response status codes."""

    OK = 0
    UNKNOWN_SEGMENT = 1
    OUT_OF_BOUNDS = 2
    AUTH_FAILED = 3
    BAD_REQUEST = 4


STATUS_REASONS: dict[int, str] = {
    Status.UNKNOWN_SEGMENT: "unknown segment on the target (unregistered?)",
    Status.OUT_OF_BOUNDS: "request outside the target segment's bounds",
    Status.AUTH_FAILED: "authentication failed",
    Status.BAD_REQUEST: "bad request",
}


class ProtocolError(ValueError):
    """Bytes that are not a valid frame; the connection carrying them must be closed."""


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded frame header."""

    op: Op
    segment: int = 0
    status: int = 0
    request_id: int = 0
    offset: int = 0
    length: int = 0
    flags: int = 0

    def encode(self) -> bytes:
        """The 40 wire bytes of this header."""
        return HEADER.pack(
            MAGIC,
            VERSION,
            int(self.op),
            self.flags,
            self.segment,
            self.status,
            self.request_id,
            self.offset,
            self.length,
        )


def decode_header(data: bytes | bytearray | memoryview) -> Header:
    """Decode and validate one header.

    Args:
        data: Exactly ``HEADER_SIZE`` bytes.

    Returns:
        The header.

    Raises:
        ProtocolError: Wrong size, bad magic, unsupported version, unknown op, or a
            length above the bound for its op.
    """
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"header must be {HEADER_SIZE} bytes, got {len(data)}")
    magic, version, op, flags, seg, status, req, off, length = HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}")
    if version != VERSION:
        raise ProtocolError(f"unsupported version {version}")
    try:
        code = Op(op)
    except ValueError:
        raise ProtocolError(f"unknown op {op}") from None
    limit = MAX_DATA_LENGTH if code in DATA_OPS else MAX_CONTROL_LENGTH
    if length > limit:
        raise ProtocolError(f"absurd length {length} for {code.name} (max {limit})")
    return Header(code, seg, status, req, off, length, flags)


def encode_frame(header: Header, payload: bytes = b"") -> bytes:
    """Header plus payload; the header's length is set to the payload's.

    Raises:
        ProtocolError: The payload is longer than allowed for the op.
    """
    limit = MAX_DATA_LENGTH if header.op in DATA_OPS else MAX_CONTROL_LENGTH
    if len(payload) > limit:
        raise ProtocolError(f"payload of {len(payload)} bytes too long for {header.op.name}")
    h = Header(
        header.op,
        header.segment,
        header.status,
        header.request_id,
        header.offset,
        len(payload),
        header.flags,
    )
    return h.encode() + payload


@dataclass(frozen=True, slots=True)
class Frame:
    """A whole frame: header plus payload."""

    header: Header
    payload: bytes


class FrameDecoder:
    """Incremental decoder: feed bytes, take complete control frames.

    Only frames whose payload follows the header are returned whole (a READ's length
    is bytes *wanted*, so READ frames carry no payload). Once it raised
    :class:`ProtocolError` the decoder is poisoned and raises again.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._error: ProtocolError | None = None

    def feed(self, data: bytes) -> list[Frame]:
        """Append bytes and return the frames now complete.

        Raises:
            ProtocolError: The stream is malformed.
        """
        if self._error is not None:
            raise self._error
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= HEADER_SIZE:
            try:
                header = decode_header(bytes(self._buf[:HEADER_SIZE]))
            except ProtocolError as exc:
                self._error = exc
                raise
            body = 0 if header.op == Op.READ else header.length
            if len(self._buf) < HEADER_SIZE + body:
                break
            payload = bytes(self._buf[HEADER_SIZE : HEADER_SIZE + body])
            del self._buf[: HEADER_SIZE + body]
            frames.append(Frame(header, payload))
        return frames
