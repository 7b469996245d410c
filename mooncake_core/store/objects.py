"""Object metadata: compact records, because the master holds millions of them.

An object has one or more replicas; a replica is a tuple of slices; a slice is a
``(segment, offset, length)`` named tuple. All of them are tuples (no per-object dicts),
and :class:`ObjectMeta` uses ``__slots__``: about 0.5 KiB per object with its key.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple


class ObjectState(IntEnum):
    """Write state of an object (values match ``ObjectState`` in store.proto)."""

    PROCESSING = 1
    """PutStart done, data being written; invisible to readers."""
    COMPLETE = 2
    """PutEnd done; readable."""


class Slice(NamedTuple):
    """A contiguous piece of one replica inside one segment."""

    segment: str
    offset: int
    length: int


Replica = tuple[Slice, ...]
"""One full copy of an object: its slices in object order."""


RUN_ID = secrets.randbits(63) | 1
"""This process's random id: with it, an object ``version`` is never handed out twice,
by this master process or another (a restarted master, a new HA leader)."""
_NEXT = itertools.count(1).__next__


def replica_segments(replica: Replica) -> frozenset[str]:
    """Segments a replica touches."""
    return frozenset(s.segment for s in replica)


class ObjectMeta:
    """Master-side record of one object.

    Times are the master's monotonic clock (``now`` of the call that set them).

    SSD tier: ``ssd`` names the segments whose node holds a checksummed file of this
    version (an object with no replica but a non-empty ``ssd`` is *SSD-only*);
    ``token`` identifies the version (0 until PutEnd); ``stages`` counts how often it
    was staged back into DRAM (promotion after ``promote_after``).

    ``version`` changes whenever ``replicas`` is set (a new object, a replica added,
    dropped, staged or evicted): a number this process never hands out twice (with
    :data:`RUN_ID`, no master does). A client that read a location of version ``v``
    knows the bytes there are still this object's while the master answers ``v``.
    """

    __slots__ = (
        "_replicas",
        "client_id",
        "last_access",
        "lease_expiry",
        "read_hold",
        "size",
        "ssd",
        "stages",
        "started",
        "state",
        "token",
        "version",
    )

    def __init__(
        self, size: int, replicas: tuple[Replica, ...], client_id: str, now: float
    ) -> None:
        self.size = size
        self.replicas = replicas
        self.state = ObjectState.PROCESSING
        self.client_id = client_id
        self.started = now
        self.last_access = now
        self.lease_expiry = 0.0
        self.read_hold = 0.0
        """Restored by a rebuilt master: readers of the previous one may read it until
        then (their leases were not journaled)."""
        self.ssd: tuple[str, ...] = ()
        self.token = 0
        self.stages = 0

    @property
    def replicas(self) -> tuple[Replica, ...]:
        """Where the object's bytes are (every assignment gives a new ``version``)."""
        return self._replicas

    @replicas.setter
    def replicas(self, value: tuple[Replica, ...]) -> None:
        self._replicas = value
        self.version = _NEXT()

    def leased(self, now: float) -> bool:
        """Whether a reader's lease still protects this object."""
        return self.lease_expiry > now

    def held(self, now: float) -> bool:
        """Whether a reader may be reading it: leased, or restored less than a lease ago
        (its bytes are not reclaimed, by eviction or otherwise, before then)."""
        return self.lease_expiry > now or self.read_hold > now

    @property
    def complete(self) -> bool:
        """Whether readers may see it."""
        return self.state == ObjectState.COMPLETE


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """An object as ``Stat`` reports it (times relative to the call's ``now``)."""

    key: str
    size: int
    state: ObjectState
    replicas: tuple[Replica, ...]
    lease_remaining_s: float
    idle_s: float
    pin: PinLevel
    pin_remaining_s: float | None
    ssd_segments: tuple[str, ...] = ()
    """Segments whose node holds an SSD copy (sorted)."""


class PinLevel(IntEnum):
    """Effective protection of an object against eviction."""

    NONE = 0
    SOFT = 1
    HARD = 2
