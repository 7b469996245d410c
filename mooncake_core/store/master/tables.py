"""The tables of the master's core that are not segments, pins or SSD tier work. Sans-IO.

Each is a small object that owns its data; the rule modules change them through these
methods (or the documented public attributes):

- :class:`ObjectTable`: every object, in recency order, with the keys being written and
  a sorted key index;
- :class:`ReplicaMoves`: replicas being added and dropped replicas waiting for a lease;
- :class:`HeldRanges`: freed ranges kept allocated while a reader may still read them;
- :class:`GrantTable`: ranges granted to a writer ahead of its next put (:mod:`.grants`);
- :class:`MasterCounters`: the totals the snapshot reports (not journaled).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import ItemsView, Iterator, KeysView
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ErrorCode, NotFoundError
from ..keyindex import SortedKeys
from ..objects import RUN_ID, ObjectMeta, Replica, Slice
from ..results import ReplicateConfig

if TYPE_CHECKING:
    from ..segment import Segment
    from ..segment_table import SegmentTable


class ObjectTable:
    """Objects by key, least recently used first.

    ``processing`` (key -> PutStart time, oldest first) names the objects being written;
    ``sorted_keys`` indexes every key in key order. :meth:`add` and :meth:`remove` keep
    the three in step.
    """

    __slots__ = ("_by_key", "processing", "sorted_keys")

    def __init__(self) -> None:
        self._by_key: dict[str, ObjectMeta] = {}
        self.processing: dict[str, float] = {}
        """key -> PutStart time of the objects being written, oldest first."""
        self.sorted_keys = SortedKeys()
        """Every key, in key order (listing, prefix and regex removal)."""

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __getitem__(self, key: str) -> ObjectMeta:
        return self._by_key[key]

    def get(self, key: str) -> ObjectMeta | None:
        """The object of ``key``, or None."""
        return self._by_key.get(key)

    def require(self, key: str) -> ObjectMeta:
        """The object of ``key``.

        Raises:
            NotFoundError: OBJECT_NOT_FOUND.
        """
        obj = self._by_key.get(key)
        if obj is None:
            raise NotFoundError(ErrorCode.OBJECT_NOT_FOUND, f"no object with key {key!r}")
        return obj

    def items(self) -> ItemsView[str, ObjectMeta]:
        """``(key, object)`` least recently used first (a live view)."""
        return self._by_key.items()

    def keys(self) -> KeysView[str]:
        """The keys, least recently used first."""
        return self._by_key.keys()

    def add(self, key: str, obj: ObjectMeta, processing_since: float | None = None) -> None:
        """Register ``obj`` as the most recently used; ``processing_since``: it is being
        written, since then."""
        if processing_since is not None:
            self.processing[key] = processing_since
        self._by_key[key] = obj
        self.sorted_keys.add(key)

    def remove(self, key: str) -> None:
        """Forget ``key`` (which must be known)."""
        del self._by_key[key]
        self.processing.pop(key, None)
        self.sorted_keys.discard(key)

    def mark_complete(self, key: str) -> None:
        """``key`` is no longer being written."""
        del self.processing[key]

    def touch(self, key: str, obj: ObjectMeta) -> None:
        """Make ``key`` the most recently used."""
        # Re-inserting moves the key to the end of the dict.
        del self._by_key[key]
        self._by_key[key] = obj


class ReplicaMoves:
    """Replica moves in flight (docs/store.md, "Moving replicas").

    A replica being added is allocated but not in ``obj.replicas`` (readers never see it)
    until AddReplicaEnd; a dropped replica leaves ``obj.replicas`` at once but keeps its
    space until the lease that existed at the drop ends.
    """

    __slots__ = ("adding", "dropping")

    def __init__(self) -> None:
        self.adding: dict[str, tuple[Replica, float]] = {}
        """key -> (replica being added, start time), oldest first."""
        self.dropping: dict[str, list[tuple[float, Replica]]] = {}
        """key -> [(free at, dropped replica)]."""

    def involves(self, key: str) -> bool:
        """Whether ``key`` has a replica being added or a drop waiting."""
        return key in self.adding or key in self.dropping


@dataclass(frozen=True, slots=True)
class Held:
    """A freed range kept allocated until no reader can be reading it."""

    segment: Segment
    """The segment object it was taken from (not its name: a remount is another one)."""
    length: int
    free_at: float


class HeldRanges:
    """Freed ranges a reader may still read (docs/store.md, "Reads never see reclaimed
    bytes"), released into the very segment object they were taken from."""

    __slots__ = ("_next", "ranges")

    def __init__(self) -> None:
        self.ranges: dict[tuple[str, int], Held] = {}
        """(segment name, offset) -> the hold."""
        self._next = math.inf  # earliest free_at in ranges

    def hold(self, seg: Segment, offset: int, length: int, until: float) -> None:
        """Keep ``seg``'s allocated range at ``offset`` until ``until``."""
        self.ranges[(seg.name, offset)] = Held(seg, length, until)
        self._next = min(self._next, until)

    def finish(self, now: float, segments: SegmentTable) -> int:
        """Release the holds whose time has come; returns how many were released (holds
        of segments that are gone are dropped without counting)."""
        if now < self._next:
            return 0
        freed = 0
        nxt = math.inf
        for (name, offset), h in list(self.ranges.items()):
            if h.free_at > now:
                nxt = min(nxt, h.free_at)
                continue
            del self.ranges[(name, offset)]
            if segments.find(name) is h.segment:  # else: gone with its segment
                h.segment.allocator.release(offset, h.length)
                freed += 1
        self._next = nxt
        return freed

    def take(self, segment: str, offset: int, length: int, segments: SegmentTable) -> float | None:
        """Take a held range back (it stays allocated, no longer held); returns when its
        hold would have ended, or None if it is not held."""
        h = self.ranges.get((segment, offset))
        if h is None or h.length != length or segments.find(segment) is not h.segment:
            return None
        del self.ranges[(segment, offset)]
        return h.free_at

    def live(self, segments: SegmentTable) -> list[tuple[str, int, int, float]]:
        """``(segment, offset, length, free at)`` sorted, leaving out holds of segments
        that are gone."""
        return sorted(
            (name, off, h.length, h.free_at)
            for (name, off), h in self.ranges.items()
            if segments.find(name) is h.segment
        )


_GRANT_BASE = (RUN_ID & 0x7FFF_FFFF) << 32
_GRANT_IDS = itertools.count(1)


@dataclass(slots=True)
class Grant:
    """Replicas allocated for a writer's next put, before it names the key (never
    changed once made; not frozen, which makes a batch's 64 cost 3x as much)."""

    client_id: str
    size: int
    replicas: tuple[Replica, ...]
    config: ReplicateConfig
    started: float
    """When it was handed out (the master's clock): its writer starts no transfer into
    it after ``put_timeout_s``, and the master holds it until ``put_release_s``."""
    batch: bool = False
    """One of the grants of a writer's next batch (counted apart from single grants)."""

    @property
    def slices(self) -> list[Slice]:
        """Every slice of every replica (a :class:`Slice` is its ``(segment, offset,
        length)``)."""
        return [sl for r in self.replicas for sl in r]


class GrantTable:
    """Grants by id, oldest first. An id is never handed out twice, by this process's
    cores (one counter for all: a core rebuilt from the journal goes on counting) or
    another process (its high 31 bits are :data:`~..objects.RUN_ID`'s): a grant id a
    client got from a master that is gone never names a range a later one granted."""

    __slots__ = ("_by_id", "_released")

    def __init__(self) -> None:
        self._by_id: dict[int, Grant] = {}
        self._released: dict[str, list[tuple[int, int, float]]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Grant]:
        return iter(self._by_id.values())

    def add(self, grant: Grant) -> int:
        """Record ``grant``; returns its id."""
        gid = _GRANT_BASE | (next(_GRANT_IDS) & 0xFFFF_FFFF)
        self._by_id[gid] = grant
        return gid

    def get(self, grant_id: int) -> Grant | None:
        """The grant of that id, or None."""
        return self._by_id.get(grant_id)

    def pop(self, grant_id: int) -> Grant | None:
        """Forget one grant; returns it (None if unknown)."""
        return self._by_id.pop(grant_id, None)

    def bytes(self) -> int:
        """Bytes all grants hold (every replica)."""
        return sum(sl.length for g in self._by_id.values() for sl in g.slices)

    def pop_within(self, ranges: set[tuple[str, int, int]]) -> list[Grant]:
        """Forget and return the grants whose every slice is one of ``ranges``
        (``(segment, offset, length)``)."""
        out = [gid for gid, g in self._by_id.items() if all(sl in ranges for sl in g.slices)]
        return [self._by_id.pop(gid) for gid in out]

    def remember_released(self, segment: str, offset: int, length: int, until: float) -> None:
        """A grant's range on a drained segment was freed while its writer may still
        write it until ``until`` (nothing is placed on a drained segment): held again if
        the segment is undrained sooner (:meth:`take_released`)."""
        self._released.setdefault(segment, []).append((offset, length, until))

    def take_released(self, segment: str) -> list[tuple[int, int, float]]:
        """Forget and return what :meth:`remember_released` kept for ``segment``."""
        return self._released.pop(segment, [])

    def count(self, client_id: str, *, batch: bool = False) -> int:
        """How many single grants (``batch``: batch grants) ``client_id`` holds."""
        return sum(1 for g in self._by_id.values() if g.client_id == client_id and g.batch == batch)

    def pop_started_before(self, limit: float) -> list[Grant]:
        """Forget and return the grants handed out at or before ``limit``."""
        out = []
        for gid, g in self._by_id.items():
            if g.started > limit:
                break  # insertion order is start order
            out.append(gid)
        return [self._by_id.pop(gid) for gid in out]

    def pop_on_segment(self, name: str) -> list[Grant]:
        """Forget and return the grants with a slice on segment ``name``."""
        out = [gid for gid, g in self._by_id.items() if any(sl.segment == name for sl in g.slices)]
        return [self._by_id.pop(gid) for gid in out]


@dataclass(slots=True)
class MasterCounters:
    """Totals since the core started (reported by the snapshot; not journaled, so a
    core rebuilt from the journal takes them over from the old one)."""

    evicted_objects: int = 0
    evicted_bytes: int = 0
    eviction_rounds: int = 0
    removed: int = 0
    expired_puts: int = 0
    lost: int = 0
    offloaded_evictions: int = 0
    ssd_offloads: int = 0
    ssd_stages: int = 0
    ssd_stage_failures: int = 0
    ssd_promotions: int = 0
    ssd_lost: int = 0
