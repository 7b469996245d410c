"""A memory segment lent to the store by a client, and its lifecycle states.

    mount ──> MOUNTED ──unmount──> UNMOUNTING ──grace over──> (gone; replicas dropped)
                 │                     (readable, no new allocations)
                 └──drain──> DRAINING ──no replica left──> DRAINED
                             (readable, no new allocations)

A client that stops heartbeating loses its segments at once (no grace: its memory is gone).
Before that, a segment whose client missed a heartbeat, or whose data port a writer
reported unreachable, is *suspect*: still MOUNTED and readable, but new replicas go to
other segments while enough healthy ones remain (see :mod:`.segment_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .allocator import OffsetAllocator


class SegmentState(IntEnum):
    """Lifecycle state of a segment (values match ``SegmentState`` in store.proto)."""

    MOUNTED = 1
    UNMOUNTING = 2
    DRAINING = 3
    DRAINED = 4


class Segment:
    """Master-side record of one segment: owner, address, allocator, resident keys.

    Args:
        name: cluster-unique segment name.
        client_id: the client that hosts the memory (its heartbeats keep it alive).
        capacity: bytes lent.
        transport_address: where the Transfer Engine reaches it (``host:port``).
        location: memory location, e.g. ``cpu:0`` (topology matrix key).
        alignment: allocation alignment.
        ssd_capacity: bytes of SSD tier the node keeps behind this segment (0: none).
    """

    __slots__ = (
        "allocator",
        "client_id",
        "keys",
        "location",
        "name",
        "ssd_capacity",
        "ssd_keys",
        "state",
        "suspect",
        "transport_address",
        "unmount_deadline",
    )

    def __init__(
        self,
        name: str,
        client_id: str,
        capacity: int,
        transport_address: str,
        location: str,
        alignment: int = 1,
        ssd_capacity: int = 0,
    ) -> None:
        self.name = name
        self.client_id = client_id
        self.transport_address = transport_address
        self.location = location
        self.allocator = OffsetAllocator(capacity, alignment)
        self.state = SegmentState.MOUNTED
        self.suspect = False
        """Its client missed a heartbeat or its data port was reported unreachable."""
        self.unmount_deadline = 0.0
        self.keys: set[str] = set()
        """Keys with at least one slice here (so losing the segment is O(its keys))."""
        self.ssd_capacity = ssd_capacity
        self.ssd_keys: set[str] = set()
        """Keys with an SSD copy on this segment's node."""

    @property
    def capacity(self) -> int:
        """Bytes lent."""
        return self.allocator.capacity

    @property
    def used(self) -> int:
        """Bytes allocated (after alignment rounding)."""
        return self.allocator.used

    @property
    def allocatable(self) -> bool:
        """Whether new replicas may be placed here."""
        return self.state == SegmentState.MOUNTED

    def snapshot(self) -> SegmentSnapshot:
        """Immutable view for the read-model."""
        return SegmentSnapshot(
            name=self.name,
            client_id=self.client_id,
            state=self.state,
            capacity=self.capacity,
            used=self.used,
            keys=len(self.keys),
            transport_address=self.transport_address,
            location=self.location,
            free_blocks=self.allocator.free_blocks,
            largest_free=self.allocator.largest_free,
            ssd_capacity=self.ssd_capacity,
            ssd_keys=len(self.ssd_keys),
            suspect=self.suspect,
        )


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """One segment as the CLI, dashboard and metrics see it."""

    name: str
    client_id: str
    state: SegmentState
    capacity: int
    used: int
    keys: int
    transport_address: str
    location: str
    free_blocks: int
    largest_free: int
    ssd_capacity: int = 0
    """SSD tier bytes behind the segment (0: none)."""
    ssd_keys: int = 0
    """Objects with an SSD copy on this segment's node."""
    suspect: bool = False
    """Left out of new placements: its client missed a heartbeat, or a writer found its
    data port unreachable (see :mod:`.segment_table`)."""
