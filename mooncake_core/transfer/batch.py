"""Batches and per-request state (internal to the engine; callers see TransferStatus)."""

from __future__ import annotations

import threading

from .request import TransferRequest, TransferState, TransferStatus


class RequestState:
    """Mutable state of one submitted request, guarded by the engine's condition."""

    __slots__ = ("deadline", "pending", "reason", "request", "state", "transferred", "transport")

    def __init__(self, request: TransferRequest, transport: str, deadline: float) -> None:
        self.request = request
        self.transport = transport
        self.deadline = deadline
        self.state = TransferState.WAITING
        self.transferred = 0
        self.pending = 0
        self.reason: str | None = None

    def status(self) -> TransferStatus:
        """Immutable view."""
        return TransferStatus(self.state, self.transferred, self.reason)


class Batch:
    """A batch handle (returned by ``TransferEngine.allocate_batch``).

    Attributes:
        batch_id: Engine-unique id.
        capacity: Most requests it can hold.
    """

    def __init__(self, batch_id: int, capacity: int) -> None:
        self.batch_id = batch_id
        self.capacity = capacity
        self.requests: list[RequestState] = []
        self.freed = False

    def __repr__(self) -> str:
        return f"Batch(id={self.batch_id}, requests={len(self.requests)}/{self.capacity})"


class Outcome:
    """Completion bookkeeping shared by the transports (engine-wide condition)."""

    def __init__(self) -> None:
        self.cv = threading.Condition()

    def complete(self, st: RequestState, nbytes: int) -> bool:
        """Count ``nbytes`` of one slice done; True if this finished the request.

        Must be called with ``cv`` held.
        """
        st.pending -= 1
        if st.state is not TransferState.WAITING:
            return False
        st.transferred += nbytes
        if st.pending == 0:
            st.state = TransferState.COMPLETED
            return True
        return False

    def fail(self, st: RequestState, reason: str) -> bool:
        """Fail a request (first reason wins); True if it was still waiting.

        Must be called with ``cv`` held.
        """
        if st.state is not TransferState.WAITING:
            return False
        st.state = TransferState.FAILED
        st.reason = reason
        return True
