"""Restoring objects into a fresh :class:`MasterState` at their exact ranges. Sans-IO.

A master rebuilt from its journal (:mod:`.ha.rebuild`) must put every object back at the
exact ranges its bytes occupy on the nodes; the core otherwise only knows "allocate
somewhere". This module reserves those ranges with the segment allocator's public
``allocate``/``release`` (see :func:`reserve_exact`) and registers the objects in the
core's tables; :meth:`MasterState.restore_objects` is its public face. SSD copies are
restored by :meth:`MasterState.restore_ssd_copies`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .. import events as ev
from ..allocator import OffsetAllocator
from ..errors import ConflictError, ErrorCode, StoreError
from ..objects import ObjectMeta, ObjectState, Replica
from . import removal as removal_ops
from . import space
from .core import MasterCore

if TYPE_CHECKING:
    from ..segment import Segment

RestoredObject = tuple[str, int, tuple[Replica, ...], bool]
"""``(key, size, replicas, complete)`` of one object to restore."""


class RebuildError(RuntimeError):
    """The image is inconsistent (overlapping ranges, ranges outside a segment)."""


def reserve_exact(alloc: OffsetAllocator, ranges: list[tuple[int, int]], segment: str) -> None:
    """Mark exactly ``ranges`` (offset, length) as allocated in a fresh allocator.

    With only the tail block free, best fit always returns the tail's start, so
    allocating the gaps and the ranges in offset order lays them out exactly; the gaps
    are released afterwards (and coalesce). On failure everything this call allocated
    is released again.

    Raises:
        RebuildError: a range overlaps the one before it or does not fit the segment.
    """
    cursor = 0
    gaps: list[tuple[int, int]] = []
    taken: list[tuple[int, int]] = []
    try:
        for off, length in sorted(ranges):
            if off < cursor:
                raise RebuildError(
                    f"segment {segment!r}: range at {off} overlaps one before {cursor}"
                )
            if off > cursor:
                if alloc.allocate(off - cursor) != cursor:
                    raise RebuildError(f"segment {segment!r}: cannot reserve the gap at {cursor}")
                gaps.append((cursor, off - cursor))
            got = alloc.allocate(length)
            if got is not None:
                taken.append((got, length))
            if got != off:
                raise RebuildError(
                    f"segment {segment!r}: range [{off}, +{length}) does not fit its capacity"
                )
            cursor = off + alloc.rounded(length)
    except RebuildError:
        for off, length in taken + gaps:
            alloc.release(off, length)
        raise
    for off, length in gaps:
        alloc.release(off, length)


def restore_objects(
    st: MasterCore,
    objects: Sequence[RestoredObject],
    now: float,
    token_base: int,
    read_hold: float = 0.0,
) -> None:
    """Install ``objects`` in ``st`` at exactly their ranges (see
    :meth:`MasterState.restore_objects`)."""
    table = st.segments
    keys_in = {o[0] for o in objects}
    if len(keys_in) != len(objects) or not keys_in.isdisjoint(st.objects):
        seen: set[str] = set()
        for key, _, _, _ in objects:
            if key in st.objects or key in seen:
                raise ConflictError(
                    ErrorCode.OBJECT_ALREADY_EXISTS, f"object {key!r} is already restored"
                )
            seen.add(key)
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for _, _, replicas, _ in objects:
        for r in replicas:
            for sl in r:
                ranges[sl.segment].append((sl.offset, sl.length))
    segs = {name: table.get(name) for name in ranges}  # NotFoundError before any change
    done: list[str] = []
    try:
        for name, rs in ranges.items():
            reserve_exact(segs[name].allocator, rs, name)
            done.append(name)
    except RebuildError:
        for name in done:
            for off, length in ranges[name]:
                segs[name].allocator.release(off, length)
        raise
    st.tier.next_token = token_base
    _install(st, objects, now, read_hold)


def _install(
    st: MasterCore, objects: Sequence[RestoredObject], now: float, read_hold: float = 0.0
) -> None:
    """Register objects whose ranges are already reserved."""
    add = st.objects.add
    complete_state = ObjectState.COMPLETE
    tier = st.tier
    segs = st.segments
    # Hot loop (promotion time grows with it): plain loops, no generators.
    for key, size, replicas, complete in objects:
        meta = ObjectMeta(size, replicas, "", now)
        meta.read_hold = read_hold
        if complete:
            meta.state = complete_state
            meta.token = tier.new_token()
            add(key, meta)
        else:
            add(key, meta, now)  # put_timeout_s counts from the restart
        for r in replicas:
            for sl in r:
                segs.get(sl.segment).keys.add(key)


def restore_ssd_copies(ms: MasterCore, key: str, segments: Iterable[str]) -> None:
    """Body of :meth:`MasterState.restore_ssd_copies`."""
    obj = ms.objects.require(key)
    for name in segments:
        seg = ms.segments.find(name)
        if seg is None or name in obj.ssd:
            continue
        obj.ssd = (*obj.ssd, name)
        seg.ssd_keys.add(key)
    if obj.complete and not obj.replicas and obj.ssd:
        ms.ssd_only.add(key)


def reconcile(
    ms: MasterCore,
    objects: Mapping[str, RestoredObject | None],
    pins: Mapping[tuple[str, bool], tuple[bool, float | None] | None],
    now: float,
) -> None:
    """Put the named objects and key/prefix pins back as the journal has them (an undo).

    The service calls this when a change it applied to the tables could not be
    journaled: every key the change touched is dropped (its ranges released) and
    reinstalled at exactly the ranges the journal gives (``None``: the key is absent),
    every pin touched is set or cleared likewise. Dropping first frees whatever the
    failed change allocated, so the journal's ranges are free again when they are
    reserved. Events emitted on the way are discarded (an undo is not news).

    Args:
        objects: key -> ``(key, size, replicas, complete)`` as journaled, or ``None``.
        pins: ``(target, is_prefix)`` -> ``(hard, expires_at)`` (monotonic), or ``None``.

    Raises:
        RebuildError, StoreError: the journal's version cannot be reinstalled (the
            caller then rebuilds the whole state from the journal).
    """
    for key in objects:
        obj = ms.objects.get(key)
        if obj is not None:
            removal_ops.drop(ms, key, obj, ev.RemoveReason.REVOKED, now, keep_pin=True)
    back = [o for o in objects.values() if o is not None]
    taken: list[tuple[OffsetAllocator, int, int]] = []
    unheld: list[tuple[Segment, int, int, float]] = []
    leases: dict[str, float] = {}
    try:
        for key, _, replicas, _ in back:
            for r in replicas:
                for sl in r:
                    seg = ms.segments.get(sl.segment)  # NotFoundError
                    # A range held for readers (the key was dropped under a lease) is
                    # the key's own again, and so is the lease that protected it.
                    was = removal_ops.take_held(ms, sl.segment, sl.offset, sl.length)
                    if was is not None:
                        unheld.append((seg, sl.offset, sl.length, was))
                        leases[key] = max(leases.get(key, 0.0), was)
                        continue
                    if not seg.allocator.allocate_at(sl.offset, sl.length):
                        raise RebuildError(
                            f"{key!r}: range [{sl.offset}, +{sl.length}) of segment "
                            f"{sl.segment!r} is taken"
                        )
                    taken.append((seg.allocator, sl.offset, sl.length))
    except (RebuildError, StoreError):
        for alloc, off, length in taken:
            alloc.release(off, length)
        for seg, off, length, until in unheld:
            space.free_range(ms, seg, off, length, until)
        raise
    _install(ms, back, now)
    for key, until in leases.items():
        ms.objects[key].lease_expiry = until
    for (target, is_prefix), want in pins.items():
        if want is None:
            ms.pins.clear(target, is_prefix=is_prefix)
        else:
            ms.pins.set(target, is_prefix=is_prefix, hard=want[0], expires_at=want[1])
    ms.events.clear()


class RestoreApi(MasterCore):
    """Restoring a rebuilt master's objects and SSD copies.

    Part of :class:`~.state.MasterState`.
    """

    def restore_objects(
        self,
        objects: Sequence[RestoredObject],
        now: float,
        *,
        token_base: int,
        read_hold: float = 0.0,
    ) -> None:
        """Install objects rebuilt from a journal image at exactly the ranges their bytes
        occupy (master rebuild; emits no event).

        Call it on a state whose segments are mounted and hold nothing yet. Nothing is
        changed when it raises.

        Args:
            objects: ``(key, size, replicas, complete)`` in recency order (least recently
                used first); every slice lies on a mounted segment. Incomplete objects
                become PROCESSING, their ``put_timeout_s`` counting from ``now``.
            now: master clock.
            token_base: version tokens of the complete objects count up from here (a
                rebuilt master starts above any the previous one handed out).
            read_hold: until when readers of the previous master may still read the
                restored objects (their leases were not journaled): before then they are
                not evicted, and a remove or replace holds their ranges until then.

        Raises:
            NotFoundError: a slice names a segment that is not mounted.
            ConflictError: a key is already known or repeated.
            RebuildError: ranges overlap or do not fit their segment.
        """
        restore_objects(self, objects, now, token_base, read_hold)

    def has_object(self, key: str) -> bool:
        """Whether ``key`` is known at all, complete or being written."""
        return key in self.objects

    def restore_ssd_copies(self, key: str, segments: Iterable[str]) -> None:
        """Record SSD copies of a restored object (master rebuild; emits no event).

        Segments that are not mounted are ignored. An object left with neither a
        replica nor an SSD copy is not touched (the caller drops it).

        Raises:
            NotFoundError: no such object.
        """
        restore_ssd_copies(self, key, segments)
