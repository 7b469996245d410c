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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .allocator import OffsetAllocator
from .errors import ConflictError, ErrorCode
from .objects import ObjectMeta, ObjectState, Replica

if TYPE_CHECKING:
    from .master_state import MasterState

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
    st: MasterState, objects: Sequence[RestoredObject], now: float, token_base: int
) -> None:
    """Install ``objects`` in ``st`` at exactly their ranges (see
    :meth:`MasterState.restore_objects`)."""
    table = st._segments
    keys_in = {o[0] for o in objects}
    if len(keys_in) != len(objects) or not keys_in.isdisjoint(st._objects):
        seen: set[str] = set()
        for key, _, _, _ in objects:
            if key in st._objects or key in seen:
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
    objects_table, processing, keys = st._objects, st._processing, st._keys
    complete_state = ObjectState.COMPLETE
    tier = st._tier
    tier.next_token = token_base
    # Hot loop (promotion time grows with it): plain loops, no generators.
    for key, size, replicas, complete in objects:
        meta = ObjectMeta(size, replicas, "", now)
        if complete:
            meta.state = complete_state
            meta.token = tier.new_token()
        else:
            processing[key] = now  # put_timeout_s counts from the restart
        objects_table[key] = meta
        keys.add(key)
        for r in replicas:
            for sl in r:
                segs[sl.segment].keys.add(key)


def restore_ssd_copies(ms: MasterState, key: str, segments: Iterable[str]) -> None:
    """Body of :meth:`MasterState.restore_ssd_copies`."""
    obj = ms._object(key)
    for name in segments:
        seg = ms._segments.find(name)
        if seg is None or name in obj.ssd:
            continue
        obj.ssd = (*obj.ssd, name)
        seg.ssd_keys.add(key)
    if obj.complete and not obj.replicas and obj.ssd:
        ms._ssd_only.add(key)
