"""Removing objects from the master's core: one key, by prefix, by regex, all. Sans-IO.

:func:`drop` is the one way an object leaves the tables (removed, evicted, revoked,
expired, replaced, lost): it releases the object's DRAM ranges, its pending replica
moves and its SSD tier work, clears its key pin and emits ``ObjectRemoved``. Functions
take the :class:`MasterState` they work on; its public methods delegate here and
document the behaviour.

Readers never see reclaimed bytes: a range a reader may still be reading (the object is
leased, or was restored by a rebuilt master less than ``lease_ttl_s`` ago) is not
freed but *held* (:func:`free_range`) until then, and released by :func:`finish_held`
from ``tick``, into the very segment it was taken from (a segment unmounted and mounted
again under the same name is a new allocator; the old hold is dropped with the old one).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from . import events as ev
from . import master_replicas as replica_ops
from . import master_tier_ops as tier_ops
from .errors import ConflictError, ErrorCode, InvalidArgumentError
from .objects import ObjectMeta, Replica, Slice
from .results import RemoveManyResult
from .validation import compile_pattern

if TYPE_CHECKING:
    from .master_state import MasterState
    from .segment import Segment


def remove(ms: MasterState, key: str, now: float, *, force: bool = False) -> None:
    """Body of :meth:`MasterState.remove`."""
    obj = ms.objects.require(key)
    if not force:
        check_removable(ms, key, obj, now)
    drop(ms, key, obj, ev.RemoveReason.REMOVED, now)
    ms.counters.removed += 1


def remove_by_prefix(
    ms: MasterState, prefix: str, now: float, *, force: bool = False
) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_by_prefix`."""
    if not prefix:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, "empty prefix would match every key; use remove_all"
        )
    return remove_many(ms, list(ms.objects.sorted_keys.iter_prefix(prefix)), now, force)


def remove_by_regex(
    ms: MasterState, pattern: str, now: float, *, force: bool = False
) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_by_regex`."""
    rx = compile_pattern(pattern)  # RE2: linear time, a hostile pattern cannot stall the lock
    return remove_many(
        ms, [k for k in ms.objects.sorted_keys.iter_from() if rx.search(k)], now, force
    )


def remove_all(ms: MasterState, now: float, *, force: bool = False) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_all`."""
    return remove_many(ms, list(ms.objects.sorted_keys.iter_from()), now, force)


def reader_hold(ms: MasterState, obj: ObjectMeta, now: float) -> float | None:
    """Until when a reader may still read ``obj``'s bytes (its lease, or the hold of an
    object a rebuilt master restored), or None when none can (not leased, or never
    readable)."""
    if not obj.complete:
        return None
    until = max(obj.lease_expiry, obj.read_hold)
    return until if until > now else None


def free_range(
    ms: MasterState, seg: Segment, offset: int, length: int, hold_until: float | None
) -> None:
    """Release a range now, or hold it until ``hold_until`` (see :func:`finish_held`)."""
    if hold_until is None:
        seg.allocator.release(offset, length)
        return
    ms.held.hold(seg, offset, length, hold_until)


def finish_held(ms: MasterState, now: float) -> int:
    """Release the held ranges whose time has come; returns how many."""
    return ms.held.finish(now, ms.segments)


def take_held(ms: MasterState, segment: str, offset: int, length: int) -> float | None:
    """Take a held range back for an object (an undo reinstalling it): the range stays
    allocated and is no longer held. Returns when its hold would have ended, or None if
    it is not held."""
    return ms.held.take(segment, offset, length, ms.segments)


def carry_holds(old: MasterState, fresh: MasterState, now: float) -> None:
    """Hold in ``fresh`` (a core rebuilt from the journal, which has them free) the
    ranges ``old`` keeps for readers: held ranges and replica drops waiting for a lease."""
    keep: list[tuple[str, int, int, float]] = list(old.held_ranges())
    for waiting in old.moves.dropping.values():
        keep.extend((sl.segment, sl.offset, sl.length, at) for at, r in waiting for sl in r)
    for name, offset, length, until in keep:
        seg = fresh.segments.find(name)
        if until > now and seg is not None and seg.allocator.allocate_at(offset, length):
            free_range(fresh, seg, offset, length, until)


def release(
    ms: MasterState,
    key: str,
    replicas: Iterable[Replica],
    keep: Collection[str] = (),
    *,
    hold_until: float | None = None,
) -> None:
    """Free ``replicas``' ranges (or hold them until ``hold_until``); ``key`` leaves the
    segments touched, except ``keep``."""
    touched: set[str] = set()
    for replica in replicas:
        for sl in replica:
            seg = ms.segments.find(sl.segment)
            if seg is not None:
                free_range(ms, seg, sl.offset, sl.length, hold_until)
                touched.add(sl.segment)
    for name in touched - set(keep):
        ms.segments.get(name).keys.discard(key)


def drop(
    ms: MasterState,
    key: str,
    obj: ObjectMeta,
    reason: ev.RemoveReason,
    now: float,
    *,
    keep_pin: bool = False,
) -> None:
    """Take an object out of every table (the one way an object leaves) and say why.

    Its ranges are held while a reader may still read them (:func:`reader_hold`)."""
    hold = reader_hold(ms, obj, now)
    # The ranges this drop leaves held (its replicas', and a deferred replica drop's)
    # go into its event: the journal keeps them for a restored master.
    before = set(ms.held.ranges) if hold is not None or key in ms.moves.dropping else None
    if ms.moves.involves(key):
        replica_ops.forget_moves(ms, key, now)
    tier_ops.forget_tier(ms, key, obj)
    release(ms, key, obj.replicas, hold_until=hold)
    ms.objects.remove(key)
    if not keep_pin and ms.pins.clear(key, is_prefix=False) is not None:
        ms.events.append(ev.ObjectUnpinned(now, key, False, expired=False))
    held: tuple[Replica, ...] = ()
    if before is not None:
        held = tuple(
            (Slice(name, off, ms.held.ranges[(name, off)].length),)
            for name, off in sorted(set(ms.held.ranges) - before)
        )
    ms.events.append(ev.ObjectRemoved(now, key, reason, obj.complete, held))


def check_removable(ms: MasterState, key: str, obj: ObjectMeta, now: float) -> None:
    """Raise ConflictError if the object is leased or still being written."""
    if obj.leased(now):
        raise ConflictError(
            ErrorCode.OBJECT_LEASED,
            f"object {key!r} is leased for {obj.lease_expiry - now:.3f} s more; wait or force",
        )
    if not obj.complete:
        raise ConflictError(
            ErrorCode.OBJECT_NOT_READY,
            f"object {key!r} is being written; revoke it or force",
        )


def remove_many(ms: MasterState, keys: list[str], now: float, force: bool) -> RemoveManyResult:
    """Remove ``keys`` (all known), skipping leased or unfinished ones unless ``force``."""
    removed = skipped = 0
    for key in keys:
        obj = ms.objects[key]
        if not force and (obj.leased(now) or not obj.complete):
            skipped += 1
            continue
        drop(ms, key, obj, ev.RemoveReason.REMOVED, now)
        removed += 1
    ms.counters.removed += removed
    return RemoveManyResult(removed, skipped)
