"""Removing objects from the master's core: one key, by prefix, by regex, all. Sans-IO.

:func:`drop` is the one way an object leaves the tables (removed, evicted, revoked,
expired, replaced, lost): it releases the object's DRAM ranges, its pending replica
moves and its SSD tier work, clears its key pin and emits ``ObjectRemoved``. Functions
take the :class:`MasterState` they work on; its public methods delegate here and
document the behaviour.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from . import events as ev
from . import master_replicas as replica_ops
from . import master_tier_ops as tier_ops
from .errors import ConflictError, ErrorCode, InvalidArgumentError
from .objects import ObjectMeta, Replica
from .results import RemoveManyResult
from .validation import compile_pattern

if TYPE_CHECKING:
    from .master_state import MasterState


def remove(ms: MasterState, key: str, now: float, *, force: bool = False) -> None:
    """Body of :meth:`MasterState.remove`."""
    obj = ms._object(key)
    if not force:
        check_removable(ms, key, obj, now)
    drop(ms, key, obj, ev.RemoveReason.REMOVED, now)
    ms._removed += 1


def remove_by_prefix(
    ms: MasterState, prefix: str, now: float, *, force: bool = False
) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_by_prefix`."""
    if not prefix:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, "empty prefix would match every key; use remove_all"
        )
    return remove_many(ms, list(ms._keys.iter_prefix(prefix)), now, force)


def remove_by_regex(
    ms: MasterState, pattern: str, now: float, *, force: bool = False
) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_by_regex`."""
    rx = compile_pattern(pattern)  # RE2: linear time, a hostile pattern cannot stall the lock
    return remove_many(ms, [k for k in ms._keys.iter_from() if rx.search(k)], now, force)


def remove_all(ms: MasterState, now: float, *, force: bool = False) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_all`."""
    return remove_many(ms, list(ms._keys.iter_from()), now, force)


def release(
    ms: MasterState, key: str, replicas: Iterable[Replica], keep: Collection[str] = ()
) -> None:
    """Free ``replicas``' ranges; ``key`` leaves the segments touched, except ``keep``."""
    touched: set[str] = set()
    for replica in replicas:
        for sl in replica:
            seg = ms._segments.find(sl.segment)
            if seg is not None:
                seg.allocator.release(sl.offset, sl.length)
                touched.add(sl.segment)
    for name in touched - set(keep):
        ms._segments.get(name).keys.discard(key)


def drop(
    ms: MasterState,
    key: str,
    obj: ObjectMeta,
    reason: ev.RemoveReason,
    now: float,
    *,
    keep_pin: bool = False,
) -> None:
    """Take an object out of every table (the one way an object leaves) and say why."""
    if key in ms._adding or key in ms._dropping:
        replica_ops.forget_moves(ms, key, now)
    tier_ops.forget_tier(ms, key, obj)
    release(ms, key, obj.replicas)
    del ms._objects[key]
    ms._processing.pop(key, None)
    ms._keys.discard(key)
    if not keep_pin and ms._pins.clear(key, is_prefix=False) is not None:
        ms._events.append(ev.ObjectUnpinned(now, key, False, expired=False))
    ms._events.append(ev.ObjectRemoved(now, key, reason, obj.complete))


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
        obj = ms._objects[key]
        if not force and (obj.leased(now) or not obj.complete):
            skipped += 1
            continue
        drop(ms, key, obj, ev.RemoveReason.REMOVED, now)
        removed += 1
    ms._removed += removed
    return RemoveManyResult(removed, skipped)
