"""Typed events: every metadata change the outside world may care about.

The core appends events to an outbox; the service drains it with
``MasterState.take_events()`` after each call and fans the events out to ``WatchEvents``
subscribers (the conductor's prefix index, the dashboard). Consumers keep their own view
from the stream instead of walking the master's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .objects import Replica


class RemoveReason(StrEnum):
    """Why an object disappeared."""

    REMOVED = "removed"
    """Explicit Remove / RemoveByPrefix / RemoveByRegex / RemoveAll."""
    EVICTED = "evicted"
    """Chosen by eviction."""
    EXPIRED = "expired"
    """A PutStart never completed within the put timeout."""
    SEGMENT_LOST = "segment_lost"
    """Every replica was on segments that were unmounted or whose client expired."""
    REPLACED = "replaced"
    """Overwritten by Upsert."""
    REVOKED = "revoked"
    """The writer called PutRevoke."""
    SSD_LOST = "ssd_lost"
    """An SSD-only object whose last SSD copy was dropped, missing or corrupt."""


class UnmountReason(StrEnum):
    """Why a segment left the store."""

    UNMOUNTED = "unmounted"
    """The owner unmounted it and the grace period ended."""
    CLIENT_EXPIRED = "client_expired"
    """The owner stopped heartbeating."""


@dataclass(frozen=True, slots=True)
class ObjectStored:
    """An object became readable (PutEnd)."""

    at: float
    key: str
    size: int
    replicas: tuple[Replica, ...]


@dataclass(frozen=True, slots=True)
class ObjectRemoved:
    """An object disappeared. ``was_complete`` is False for a write that never finished.

    ``held``: its replicas when their ranges stay held for readers that may still read
    them (a forced remove under a lease, see :mod:`.master.removal`); empty when freed.
    ``for_writer``: they are held because the write was discarded unfinished and its
    writer may still be writing them (until ``put_release_s`` after its PutStart)."""

    at: float
    key: str
    reason: RemoveReason
    was_complete: bool
    held: tuple[Replica, ...] = ()
    for_writer: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaDropped:
    """An object lost a replica (its segment went away, or DropReplica) but still has others."""

    at: float
    key: str
    segment: str
    replicas_left: int


@dataclass(frozen=True, slots=True)
class ReplicaAdded:
    """An object gained a readable replica (AddReplicaEnd, e.g. while draining)."""

    at: float
    key: str
    replica: Replica
    replicas: int
    """Replicas the object has now."""


@dataclass(frozen=True, slots=True)
class ObjectPinned:
    """A pin was set on a key or on a prefix (``is_prefix``)."""

    at: float
    target: str
    is_prefix: bool
    hard: bool
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class ObjectUnpinned:
    """A pin was cleared (``expired`` when its TTL ran out, else explicit or object gone)."""

    at: float
    target: str
    is_prefix: bool
    expired: bool


@dataclass(frozen=True, slots=True)
class SegmentMounted:
    """A segment joined the store."""

    at: float
    name: str
    client_id: str
    capacity: int


@dataclass(frozen=True, slots=True)
class SegmentStateChanged:
    """A segment moved to UNMOUNTING, DRAINING or DRAINED (state name in ``state``)."""

    at: float
    name: str
    state: str


@dataclass(frozen=True, slots=True)
class SegmentUnmounted:
    """A segment left the store; its replicas are gone."""

    at: float
    name: str
    reason: UnmountReason


@dataclass(frozen=True, slots=True)
class ClientExpired:
    """A client stopped heartbeating for ``client_ttl_s``."""

    at: float
    client_id: str


@dataclass(frozen=True, slots=True)
class OffloadRequested:
    """The node hosting ``segment`` should copy ``replica`` (wholly on that segment) to
    its SSD tier and confirm with TierOffloadDone carrying ``token``."""

    at: float
    key: str
    segment: str
    replica: Replica
    size: int
    token: int
    """Identifies this version of the object (a rewrite gets a new token)."""


@dataclass(frozen=True, slots=True)
class StageRequested:
    """The node hosting ``segment`` should read its SSD copy of ``key`` into ``replica``
    (freshly allocated on that segment) and confirm with TierStageDone(``request_id``)."""

    at: float
    key: str
    segment: str
    replica: Replica
    size: int
    request_id: int


@dataclass(frozen=True, slots=True)
class SsdCopyAdded:
    """The node hosting ``segment`` confirmed an SSD copy of ``key``."""

    at: float
    key: str
    segment: str
    ssd_copies: int
    """SSD copies the object has now."""
    replicas: int
    """DRAM replicas the object has now."""


@dataclass(frozen=True, slots=True)
class SsdCopyDropped:
    """``key`` lost its SSD copy on ``segment`` (disk eviction, miss, corruption, unmount);
    when nothing is left an ``ObjectRemoved`` follows."""

    at: float
    key: str
    segment: str
    ssd_copies: int
    replicas: int


Event = (
    ObjectStored
    | ObjectRemoved
    | ReplicaDropped
    | ReplicaAdded
    | ObjectPinned
    | ObjectUnpinned
    | SegmentMounted
    | SegmentStateChanged
    | SegmentUnmounted
    | ClientExpired
    | OffloadRequested
    | StageRequested
    | SsdCopyAdded
    | SsdCopyDropped
)
"""Every event type the master emits."""
