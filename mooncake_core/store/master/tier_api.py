"""The SSD tier operations of :class:`~.state.MasterState` (docs/store.md, "SSD tier
(master)"): the nodes' reports and the periodic tier upkeep. The rules are in :mod:`.tier`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..results import RemoveManyResult
from . import tier as tier_ops
from .core import MasterCore


class TierApi(MasterCore):
    """The SSD tier: offloads, stages, stage copies. Part of :class:`~.state.MasterState`."""

    def tier_offload_done(
        self,
        client_id: str,
        key: str,
        segment: str,
        token: int,
        ok: bool,
        now: float,
        reason: str = "",
    ) -> None:
        """The node of ``segment`` reports an offload it was asked for.

        ``ok``: ``segment`` joins the object's SSD set (event ``SsdCopyAdded``; a
        repeated confirmation is a no-op). Not ok: the offload is asked again after
        ``offload_retry_s``.

        Args:
            client_id: the caller; must own ``segment``.
            key: the object.
            segment: the segment named in ``OffloadRequested``.
            token: the token of that request (the object version that was copied).
            ok: whether the node wrote its file.
            now: master clock.
            reason: the node's words when not ok (unused by the core).

        Raises:
            NotFoundError: no such segment (SEGMENT_NOT_FOUND) or object (the node
                deletes its file).
            InvalidArgumentError: bad key, token 0.
            ConflictError: the segment is another client's or has no SSD tier
                (INVALID_STATE); STALE: the object was rewritten (other token), is not
                complete, or has no replica on ``segment`` any more (the node deletes
                its file).
        """
        tier_ops.offload_done(self, client_id, key, segment, token, ok, now, reason)

    def tier_stage_done(
        self,
        client_id: str,
        key: str,
        segment: str,
        request_id: int,
        ok: bool,
        now: float,
        reason: str = "",
    ) -> None:
        """The node of ``segment`` reports a stage it was asked for.

        ``ok``: the staged range becomes a readable replica (event ``ReplicaAdded``)
        with a fresh read lease for the waiting readers; it is a *stage copy*, dropped
        again once its lease ends, unless this was the object's ``promote_after``-th
        stage (then it stays: promoted). Not ok (``miss``, ``corrupt``): the range is
        freed, ``segment`` leaves the SSD set and the next SSD copy is staged; with
        none left the object is removed (reason ``ssd_lost``).

        Raises:
            NotFoundError: no such segment or object.
            InvalidArgumentError: bad key, request_id 0.
            ConflictError: the segment is another client's (INVALID_STATE); STALE: no
                stage of ``key`` on ``segment`` with this request id is pending (it
                timed out, or the object changed).
        """
        tier_ops.stage_done(self, client_id, key, segment, request_id, ok, now, reason)

    def tier_dropped(
        self, client_id: str, segment: str, keys: Sequence[str], now: float
    ) -> RemoveManyResult:
        """The node of ``segment`` no longer holds SSD files of ``keys`` (evicted for
        room, or found corrupt).

        Keys the master does not know, or knows without an SSD copy on ``segment``, are
        skipped (the node may report a file of an object removed meanwhile). A pending
        stage from that file fails (the next copy is tried). Objects left with no copy
        at all are removed (reason ``ssd_lost``).

        Returns:
            ``removed``: objects removed; ``skipped``: keys that changed nothing.

        Raises:
            NotFoundError: no such segment.
            ConflictError: the segment is another client's (INVALID_STATE).
            InvalidArgumentError: a malformed key (nothing is changed then).
        """
        return tier_ops.dropped(self, client_id, segment, keys, now)

    def expire_stages(self, now: float) -> list[str]:
        """Give up on stages pending longer than ``stage_timeout_s``; returns their keys.

        No answer is not a bad file (the node may have been away, e.g. resubscribing
        after a master restart): the range is freed but the SSD copy is kept; that
        segment is not asked again for ``stage_timeout_s``; another SSD copy is staged
        if there is one. Otherwise the key is reported by :meth:`take_stalled` and reads
        answer UNAVAILABLE until the cool-down ends.
        """
        return tier_ops.expire_stages(self, now)

    def take_stalled(self) -> list[str]:
        """Keys whose stage timed out with no other SSD copy to try since the last call
        (their waiting readers should read again: they get UNAVAILABLE)."""
        out, self.tier.stalled = self.tier.stalled, []
        return out

    def drop_stage_copies(self, now: float) -> int:
        """Drop stage copies whose read lease has ended (their SSD files stay).

        Returns:
            How many were dropped.
        """
        return tier_ops.drop_stage_copies(self, now)

    def request_offloads(self, now: float) -> int:
        """Ask nodes to copy least recently used objects to SSD ahead of eviction.

        For every MOUNTED segment with an SSD tier whose DRAM use is at or above the
        offload watermark: up to ``offload_batch`` complete objects with a replica
        wholly on it, no SSD copy there yet and no offload asked within
        ``offload_retry_s``, least recently used first (event ``OffloadRequested``).

        Returns:
            Offloads requested.
        """
        return tier_ops.request_offloads(self, now)
