"""Posting window and completion bookkeeping of one RC queue pair (sans-IO).

The verbs worker (``rdma_transport``) owns one of these per queue pair and does only
I/O: it posts what :meth:`PostingWindow.take_posts` hands out, feeds polled work
completions to :meth:`PostingWindow.on_completions`, and acts on the returned events.
The rules live here so they are tested without a device::

    queue(slices) --> [queued] --take_posts(): up to `window` in flight--> [outstanding]
    on_completions(status 0)            -> completed
    on_completions(error, first one)    -> failed (reason names the status); QP broken
    on_completions(WR_FLUSH_ERR)        -> flushed (an earlier error killed the QP)
    post_failed(...)                    -> failed; QP broken
    expire()                            -> every outstanding slice failed (no completion)
    broken: take_posts() hands out nothing; take_unposted() returns the queue

Every work request is signalled, so each slice gets exactly one completion; the
window bounds both the send queue depth and the memory the HCA may touch at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

WC_SUCCESS = 0
WC_WR_FLUSH_ERR = 5

WC_STATUS_NAMES = (
    "SUCCESS",
    "LOC_LEN_ERR",
    "LOC_QP_OP_ERR",
    "LOC_EEC_OP_ERR",
    "LOC_PROT_ERR",
    "WR_FLUSH_ERR",
    "MW_BIND_ERR",
    "BAD_RESP_ERR",
    "LOC_ACCESS_ERR",
    "REM_INV_REQ_ERR",
    "REM_ACCESS_ERR",
    "REM_OP_ERR",
    "RETRY_EXC_ERR",
    "RNR_RETRY_EXC_ERR",
    "LOC_RDD_VIOL_ERR",
    "REM_INV_RD_REQ_ERR",
    "REM_ABORT_ERR",
    "INV_EECN_ERR",
    "INV_EEC_STATE_ERR",
    "FATAL_ERR",
    "RESP_TIMEOUT_ERR",
    "GENERAL_ERR",
    "TM_ERR",
    "TM_RNDV_INCOMPLETE",
)
"""``enum ibv_wc_status`` of libibverbs' verbs.h, in value order (a stable ABI)."""


def wc_status_name(status: int) -> str:
    """``IBV_WC_<NAME>`` for a work completion status (``IBV_WC_STATUS_<n>`` if unknown)."""
    if 0 <= status < len(WC_STATUS_NAMES):
        return f"IBV_WC_{WC_STATUS_NAMES[status]}"
    return f"IBV_WC_STATUS_{status}"


@dataclass(frozen=True, slots=True)
class Completion:
    """One polled work completion (the fields of ``ibv_wc`` the bookkeeping needs)."""

    wr_id: int
    status: int
    vendor_err: int = 0


@dataclass(frozen=True, slots=True)
class WindowEvents(Generic[T]):
    """What a batch of completions (or an expiry) did to the slices.

    Attributes:
        completed: Slices whose bytes moved.
        failed: ``(slice, reason)`` for slices that failed themselves.
        flushed: Slices the device discarded after an earlier error (not their fault).
        stray: Completions whose wr_id is not outstanding (counted, otherwise ignored).
    """

    completed: tuple[T, ...] = ()
    failed: tuple[tuple[T, str], ...] = ()
    flushed: tuple[T, ...] = ()
    stray: int = 0


class PostingWindow(Generic[T]):
    """Queue, in-flight window and completion matching for one queue pair.

    Args:
        window: Most work requests in flight at once (>= 1).
        label: Names the queue pair in failure reasons (e.g. ``mlx5_0 -> 10.0.0.2:40000``).

    Raises:
        ValueError: window < 1.
    """

    def __init__(self, window: int, label: str = "rdma") -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.label = label
        self._queue: deque[T] = deque()
        self._outstanding: dict[int, T] = {}
        self._next_id = 1
        self.broken_reason: str | None = None

    @property
    def broken(self) -> bool:
        """Whether an error ended this queue pair (nothing more may be posted)."""
        return self.broken_reason is not None

    @property
    def outstanding(self) -> int:
        """Work requests posted and not yet completed."""
        return len(self._outstanding)

    @property
    def queued(self) -> int:
        """Slices waiting for room in the window."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self._queue and not self._outstanding

    def queue(self, items: Iterable[T]) -> None:
        """Append slices to post, in order."""
        self._queue.extend(items)

    def take_posts(self) -> list[tuple[int, T]]:
        """Slices to post now, each with its fresh wr_id; empty when full or broken."""
        if self.broken:
            return []
        room = self.window - len(self._outstanding)
        out: list[tuple[int, T]] = []
        while room > 0 and self._queue:
            item = self._queue.popleft()
            wr_id = self._next_id
            self._next_id += 1
            self._outstanding[wr_id] = item
            out.append((wr_id, item))
            room -= 1
        return out

    def post_failed(self, wr_ids: Iterable[int], reason: str) -> WindowEvents[T]:
        """``post_send`` refused these work requests: they fail and the QP is broken."""
        why = f"{self.label}: post_send failed: {reason}"
        failed = tuple((self._outstanding.pop(w), why) for w in wr_ids if w in self._outstanding)
        self.broken_reason = self.broken_reason or why
        return WindowEvents(failed=failed)

    def on_completions(self, records: Iterable[Completion]) -> WindowEvents[T]:
        """Match polled completions to outstanding slices."""
        completed: list[T] = []
        failed: list[tuple[T, str]] = []
        flushed: list[T] = []
        stray = 0
        for rec in records:
            item = self._outstanding.pop(rec.wr_id, None)
            if item is None:
                stray += 1
                continue
            if rec.status == WC_SUCCESS:
                completed.append(item)
            elif rec.status == WC_WR_FLUSH_ERR and self.broken:
                flushed.append(item)
            else:
                why = f"{self.label}: {wc_status_name(rec.status)} (vendor_err {rec.vendor_err:#x})"
                self.broken_reason = self.broken_reason or why
                failed.append((item, why))
        return WindowEvents(tuple(completed), tuple(failed), tuple(flushed), stray)

    def expire(self, reason: str = "no completion within the I/O timeout") -> WindowEvents[T]:
        """Fail every outstanding slice (the caller then destroys the QP)."""
        why = f"{self.label}: {reason}"
        failed = tuple((item, why) for item in self._outstanding.values())
        self._outstanding.clear()
        self.broken_reason = self.broken_reason or why
        return WindowEvents(failed=failed)

    def take_unposted(self) -> list[T]:
        """Remove and return the slices never posted (to send them elsewhere)."""
        out = list(self._queue)
        self._queue.clear()
        return out
