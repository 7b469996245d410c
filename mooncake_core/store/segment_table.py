"""The master's segment table and client liveness (no object knowledge here).

Liveness, per client, in the master's running time (see :mod:`.running_clock`)::

    heartbeat ──> alive ──silent > suspect_after_s──> suspect ──silent >= client_ttl_s──> expired
                    ▲                                  │   (readable; no new placements)
                    └──────────── next heartbeat ◀─────┘
    a writer reports the data port unreachable ──> suspect until a heartbeat that arrives
    at least ``report_hold_s`` after the report

Suspicion only steers placement (fast: one heartbeat interval, or at once on a report);
expiry, which drops the segment's data, still waits for the whole ``client_ttl_s``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

from .errors import ErrorCode, NotFoundError
from .segment import Segment, SegmentState


class SegmentTable:
    """Segments by name, iterated in name order (deterministic placement), and the last
    heartbeat of every client.

    Args:
        alignment: allocation alignment of new segments.
        suspect_after_s: silence after which a client's segments are suspect.
        report_hold_s: a reported segment stays suspect until a heartbeat at least this
            long after the report (one that was already on its way does not clear it).
    """

    __slots__ = (
        "_avoid",
        "_by_name",
        "_clients",
        "_order",
        "_reported",
        "alignment",
        "any_ssd",
        "report_hold_s",
        "suspect_after_s",
    )

    def __init__(
        self, alignment: int, suspect_after_s: float = 1.5, report_hold_s: float = 1.0
    ) -> None:
        self.alignment = alignment
        self.suspect_after_s = suspect_after_s
        self.report_hold_s = report_hold_s
        self._by_name: dict[str, Segment] = {}
        self._order: list[Segment] = []
        self._clients: dict[str, float] = {}
        self._reported: dict[str, float] = {}  # client -> when its data port was reported
        self._avoid: frozenset[str] = frozenset()
        self.any_ssd = False
        """Whether some segment has an SSD tier (a write's tier checks skip otherwise)."""

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[Segment]:
        return iter(list(self._order))

    def find(self, name: str) -> Segment | None:
        """The segment called ``name``, or None."""
        return self._by_name.get(name)

    def get(self, name: str) -> Segment:
        """The segment called ``name``.

        Raises:
            NotFoundError: SEGMENT_NOT_FOUND.
        """
        seg = self._by_name.get(name)
        if seg is None:
            raise NotFoundError(ErrorCode.SEGMENT_NOT_FOUND, f"no segment named {name!r}")
        return seg

    def allocatable(self) -> list[Segment]:
        """MOUNTED segments in name order, less those :meth:`avoiding` leaves out."""
        if self._avoid:
            return [s for s in self._order if s.allocatable and s.name not in self._avoid]
        return [s for s in self._order if s.allocatable]

    @contextlib.contextmanager
    def avoiding(self, names: Collection[str]) -> Iterator[None]:
        """Leave ``names`` out of :meth:`allocatable` for the body (one placement)."""
        self._avoid = frozenset(names)
        try:
            yield
        finally:
            self._avoid = frozenset()

    def add(
        self,
        name: str,
        client_id: str,
        capacity: int,
        transport_address: str,
        location: str,
        ssd_capacity: int = 0,
    ) -> Segment:
        """Create and register a segment (the caller checked the name is free)."""
        seg = Segment(
            name,
            client_id,
            capacity,
            transport_address,
            location,
            self.alignment,
            ssd_capacity=ssd_capacity,
        )
        self._by_name[name] = seg
        self._order = sorted(self._by_name.values(), key=lambda s: s.name)
        self.any_ssd = self.any_ssd or ssd_capacity > 0
        return seg

    def remove(self, name: str) -> None:
        """Forget a segment."""
        del self._by_name[name]
        self._order = [s for s in self._order if s.name != name]
        self.any_ssd = any(s.ssd_capacity > 0 for s in self._order)

    def owned_by(self, client_id: str) -> list[Segment]:
        """Segments hosted by ``client_id``, in name order."""
        return [s for s in self._order if s.client_id == client_id]

    def due_unmounts(self, now: float) -> list[Segment]:
        """UNMOUNTING segments whose grace period has ended."""
        return [
            s
            for s in self._order
            if s.state == SegmentState.UNMOUNTING and s.unmount_deadline <= now
        ]

    def capacity(self) -> int:
        """Bytes lent by all segments."""
        return sum(s.capacity for s in self._order)

    def used(self) -> int:
        """Bytes allocated in all segments."""
        return sum(s.used for s in self._order)

    # ---------------------------------------------------------------- clients
    @property
    def client_count(self) -> int:
        """Clients currently considered alive."""
        return len(self._clients)

    def touch_client(self, client_id: str, now: float) -> bool:
        """Record a sign of life; returns whether the client was known.

        Its segments stop being suspect, unless a report against them is younger than
        ``report_hold_s``.
        """
        known = client_id in self._clients
        self._clients[client_id] = now
        reported = self._reported.get(client_id)
        if reported is not None and now - reported >= self.report_hold_s:
            del self._reported[client_id]
            reported = None
        if reported is None:
            for seg in self._order:
                if seg.client_id == client_id:
                    seg.suspect = False
        return known

    def report_unreachable(self, names: Collection[str], now: float) -> list[str]:
        """A writer could not reach these segments: make them suspect at once.

        Returns:
            The names that were known, sorted (unknown ones are ignored).
        """
        hit = sorted(n for n in set(names) if n in self._by_name)
        for name in hit:
            seg = self._by_name[name]
            self._reported[seg.client_id] = now
            for s in self._order:
                if s.client_id == seg.client_id:
                    s.suspect = True
        return hit

    def update_suspects(self, now: float) -> None:
        """Mark segments suspect whose client is silent for over ``suspect_after_s`` or
        reported unreachable; clear the others."""
        for seg in self._order:
            seen = self._clients.get(seg.client_id)
            seg.suspect = seg.client_id in self._reported or (
                seen is not None and now - seen > self.suspect_after_s
            )

    def silent_clients(self, now: float, ttl: float) -> list[str]:
        """Clients whose last sign of life is ``ttl`` or more ago, sorted."""
        return sorted(c for c, seen in self._clients.items() if seen + ttl <= now)

    def forget_client(self, client_id: str) -> None:
        """Drop a client (its segments are the caller's business)."""
        self._clients.pop(client_id, None)
        self._reported.pop(client_id, None)
