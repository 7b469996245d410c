"""Request validation done by ``TransferEngine.submit`` before anything is sent."""

from __future__ import annotations

from typing import Any

from .directory import RemoteSegment
from .region import Region
from .request import OpCode, TransferError, TransferRequest


def check_location(location: str) -> str:
    """Validate a memory location (``cpu:N``).

    Raises:
        TransferError: ``cuda:N`` (no GPU support) or anything else unknown.
    """
    kind, _, idx = location.partition(":")
    if kind == "cpu" and idx.isdigit():
        return location
    if kind == "cuda":
        raise TransferError(f"location {location!r}: GPU memory is not supported (no CUDA build)")
    raise TransferError(f"bad location {location!r}; expected cpu:N")


_OPS = frozenset((OpCode.READ, OpCode.WRITE))


def validate_request(i: int, req: Any, regions: set[Region]) -> None:
    """Check request ``i`` of a submit before anything is sent.

    Raises:
        TransferError: Wrong type or op, unopened segment, unregistered region, or a
            range outside the region or the segment (naming the numbers).
    """
    if not isinstance(req, TransferRequest):
        raise TransferError(f"request {i}: expected TransferRequest, got {type(req).__name__}")
    if req.op not in _OPS:
        raise TransferError(f"request {i}: bad op {req.op!r}")
    if not isinstance(req.segment, RemoteSegment):
        raise TransferError(f"request {i}: segment must come from open_segment")
    if req.local not in regions:
        raise TransferError(f"request {i}: {req.local!r} is not registered with this engine")
    n, lo, to = req.length, req.local_offset, req.target_offset
    if n < 0 or lo < 0 or to < 0:
        raise TransferError(f"request {i}: negative length/offset ({n}, {lo}, {to})")
    if lo + n > req.local.length:
        raise TransferError(
            f"request {i}: local range {lo}+{n} outside region of {req.local.length} bytes"
        )
    if to + n > req.segment.size:
        raise TransferError(
            f"request {i}: target range {to}+{n} outside segment {req.segment.name} of {req.segment.size} bytes"
        )
