"""The master's segment table and client liveness (no object knowledge here)."""

from __future__ import annotations

from collections.abc import Iterator

from .errors import ErrorCode, NotFoundError
from .segment import Segment, SegmentState


class SegmentTable:
    """Segments by name, iterated in name order (deterministic placement), and the last
    heartbeat of every client.

    Args:
        alignment: allocation alignment of new segments.
    """

    __slots__ = ("_by_name", "_clients", "_order", "alignment")

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self._by_name: dict[str, Segment] = {}
        self._order: list[Segment] = []
        self._clients: dict[str, float] = {}

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
        """MOUNTED segments in name order."""
        return [s for s in self._order if s.allocatable]

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
        return seg

    def remove(self, name: str) -> None:
        """Forget a segment."""
        del self._by_name[name]
        self._order = [s for s in self._order if s.name != name]

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
        """Record a sign of life; returns whether the client was known."""
        known = client_id in self._clients
        self._clients[client_id] = now
        return known

    def silent_clients(self, now: float, ttl: float) -> list[str]:
        """Clients whose last sign of life is ``ttl`` or more ago, sorted."""
        return sorted(c for c, seen in self._clients.items() if seen + ttl <= now)

    def forget_client(self, client_id: str) -> None:
        """Drop a client (its segments are the caller's business)."""
        self._clients.pop(client_id, None)
