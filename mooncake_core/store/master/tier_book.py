"""Bookkeeping of the master's SSD tier work in flight. Sans-IO, not durable.

The master decides and the nodes move bytes (docs/store.md, "SSD tier (master)"):

    DRAM replica on a segment with an SSD tier
        ──OffloadRequested(token)──> node writes a file ──TierOffloadDone──> SSD copy
    SSD-only object read
        ──allocate a DRAM range, StageRequested(request_id)──> node reads the file
        ──TierStageDone──> DRAM replica (a *stage copy*, dropped after its lease, unless
                           the object has now been staged ``promote_after`` times)

This module keeps only what is in flight (which offloads were asked and when, which
stages are pending, which DRAM replicas are stage copies) plus the token and request
counters. A restarted master starts with an empty book and simply asks again; the SSD
copies themselves are durable (journal records ``ssd_added`` / ``ssd_dropped``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..objects import Replica


@dataclass(frozen=True, slots=True)
class PendingStage:
    """A DRAM range allocated for an SSD-only object, waiting for the node to fill it."""

    request_id: int
    segment: str
    replica: Replica
    started: float
    """Master clock when it was requested (``stage_timeout_s`` counts from here)."""


@dataclass(frozen=True, slots=True)
class StagePending:
    """Result of a read of an SSD-only object: the bytes are being staged into DRAM.

    The caller waits for the stage to settle (TierStageDone, a timeout, or the object's
    removal) and reads again.
    """

    key: str
    request_id: int
    segment: str


class TierBook:
    """Offloads asked, stages pending, stage copies, and the id counters.

    Args:
        token_base: first version token minus one (a rebuilt master starts above the
            tokens the previous one may have handed out).
    """

    __slots__ = (
        "changes",
        "next_request",
        "next_token",
        "offload_idle",
        "offloads",
        "stage_copies",
        "stages",
        "stalled",
        "timed_out",
    )

    def __init__(self, token_base: int = 0) -> None:
        self.offloads: dict[str, dict[str, float]] = {}
        """key -> {segment: master time the offload was asked (or last failed)}."""
        self.stages: dict[str, PendingStage] = {}
        """key -> its pending stage (at most one per object)."""
        self.stage_copies: dict[str, Replica] = {}
        """key -> DRAM replica made by a stage and not promoted (dropped after its lease)."""
        self.timed_out: dict[str, dict[str, float]] = {}
        """key -> {segment: master time a stage there got no answer}: the copy is kept
        (the node may just have been away) but not asked again for a while."""
        self.stalled: list[str] = []
        """Keys whose stage timed out with no other copy to try (readers waiting on
        them must be told; no event says so)."""
        self.next_token = token_base
        self.next_request = 0
        self.changes = 0
        """Bumped when new offload candidates may exist."""
        self.offload_idle: dict[str, tuple[int, float]] = {}
        """segment -> (``changes``, until): a scan found nothing to ask there; skip it
        until then unless ``changes`` moved."""

    def new_token(self) -> int:
        """A fresh object version token (never 0)."""
        self.next_token += 1
        return self.next_token

    def new_request(self) -> int:
        """A fresh stage request id (never 0)."""
        self.next_request += 1
        return self.next_request

    def offload_due(self, key: str, segment: str, now: float, retry_s: float) -> bool:
        """Whether an offload of ``key`` to ``segment`` may be asked now (none pending,
        or the last one is older than ``retry_s``)."""
        asked = self.offloads.get(key)
        if asked is None:
            return True
        at = asked.get(segment)
        return at is None or now - at >= retry_s

    def note_offload(self, key: str, segment: str, now: float) -> None:
        """Record that an offload of ``key`` to ``segment`` was asked (or failed) at ``now``."""
        self.offloads.setdefault(key, {})[segment] = now

    def clear_offload(self, key: str, segment: str | None = None) -> None:
        """Forget the offloads of ``key`` (all, or only the one to ``segment``)."""
        if segment is None:
            self.offloads.pop(key, None)
            return
        asked = self.offloads.get(key)
        if asked is not None:
            asked.pop(segment, None)
            if not asked:
                del self.offloads[key]

    def cooling(self, key: str, segment: str, now: float, cooldown_s: float) -> bool:
        """Whether a stage of ``key`` on ``segment`` got no answer less than
        ``cooldown_s`` ago."""
        at = self.timed_out.get(key, {}).get(segment)
        return at is not None and now - at < cooldown_s

    def settle(self, key: str, segment: str) -> None:
        """The node of ``segment`` answered about ``key``: forget an earlier timeout."""
        seen = self.timed_out.get(key)
        if seen is not None:
            seen.pop(segment, None)
            if not seen:
                del self.timed_out[key]

    def pending_offloads(self) -> int:
        """Offloads asked and not yet confirmed."""
        return sum(len(v) for v in self.offloads.values())
