"""Public request/status types of the Transfer Engine."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .directory import RemoteSegment
    from .region import Region


class TransferError(RuntimeError):
    """A transfer, registration or segment operation failed; the message says why."""


class OpCode(enum.IntEnum):
    """Direction of a request, seen from the initiator."""

    READ = 1
    """Copy target segment bytes into local memory."""
    WRITE = 2
    """Copy local memory into the target segment."""


class TransferState(enum.Enum):
    """Lifecycle of one request: WAITING until it ends COMPLETED or FAILED."""

    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """One READ or WRITE between a local region and a remote segment.

    Attributes:
        op: READ (remote -> local) or WRITE (local -> remote).
        local: A region returned by ``TransferEngine.register_memory``.
        local_offset: Byte offset inside ``local``.
        segment: A handle returned by ``TransferEngine.open_segment``.
        target_offset: Byte offset inside the remote segment.
        length: Bytes to move (0 completes immediately).
    """

    op: OpCode
    local: Region
    local_offset: int
    segment: RemoteSegment
    target_offset: int
    length: int


@dataclass(frozen=True, slots=True)
class TransferStatus:
    """Status of one request: its state, bytes moved so far and, if FAILED, why."""

    state: TransferState
    transferred: int
    reason: str | None = None
