"""Removing objects from the master's core: one key, by prefix, by regex, all. Sans-IO.

:func:`drop` is the one way an object leaves the tables (removed, evicted, revoked,
expired, replaced, lost): it releases the object's DRAM ranges, its pending replica
moves and its SSD tier work, clears its key pin and emits ``ObjectRemoved``. Functions
take the :class:`~.core.MasterCore` they work on; the operations of
:class:`~.state.MasterState` at the end of the module call them and document the
behaviour.

Readers never see reclaimed bytes: a range a reader may still be reading (the object is
leased, or was restored by a rebuilt master less than ``lease_ttl_s`` ago), or that
the writer of a write discarded unfinished may still be writing (``put_release_s``
from its PutStart), is not freed but *held* (:func:`.space.free_range`) until then, and
released by :func:`finish_held` from ``tick``, into the very segment it was taken from
(a segment unmounted and mounted again under the same name is a new allocator; the old
hold is dropped with the old one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import events as ev
from ..errors import ConflictError, ErrorCode, InvalidArgumentError, StoreError
from ..objects import ObjectMeta, Replica, Slice
from ..results import RemoveManyResult
from ..validation import compile_pattern, each
from . import replicas as replica_ops
from . import space
from .core import MasterCore

if TYPE_CHECKING:
    pass


def remove(ms: MasterCore, key: str, now: float, *, force: bool = False) -> None:
    """Body of :meth:`MasterState.remove`."""
    obj = ms.objects.require(key)
    if not force:
        check_removable(ms, key, obj, now)
    drop(ms, key, obj, ev.RemoveReason.REMOVED, now)
    ms.counters.removed += 1


def remove_by_prefix(
    ms: MasterCore, prefix: str, now: float, *, force: bool = False
) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_by_prefix`."""
    if not prefix:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, "empty prefix would match every key; use remove_all"
        )
    return remove_many(ms, list(ms.objects.sorted_keys.iter_prefix(prefix)), now, force)


def remove_by_regex(
    ms: MasterCore, pattern: str, now: float, *, force: bool = False
) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_by_regex`."""
    rx = compile_pattern(pattern)  # RE2: linear time, a hostile pattern cannot stall the lock
    return remove_many(
        ms, [k for k in ms.objects.sorted_keys.iter_from() if rx.search(k)], now, force
    )


def remove_all(ms: MasterCore, now: float, *, force: bool = False) -> RemoveManyResult:
    """Body of :meth:`MasterState.remove_all`."""
    return remove_many(ms, list(ms.objects.sorted_keys.iter_from()), now, force)


def finish_held(ms: MasterCore, now: float) -> int:
    """Release the held ranges whose time has come; returns how many."""
    return ms.held.finish(now, ms.segments)


def take_held(ms: MasterCore, segment: str, offset: int, length: int) -> float | None:
    """Take a held range back for an object (an undo reinstalling it): the range stays
    allocated and is no longer held. Returns when its hold would have ended, or None if
    it is not held."""
    return ms.held.take(segment, offset, length, ms.segments)


def carry_holds(old: MasterCore, fresh: MasterCore, now: float) -> None:
    """Hold in ``fresh`` (a core rebuilt from the journal, which has them free) the
    ranges ``old`` keeps for readers: held ranges and replica drops waiting for a lease."""
    keep: list[tuple[str, int, int, float]] = old.held.live(old.segments)
    for waiting in old.moves.dropping.values():
        keep.extend((sl.segment, sl.offset, sl.length, at) for at, r in waiting for sl in r)
    for name, offset, length, until in keep:
        seg = fresh.segments.find(name)
        if until > now and seg is not None and seg.allocator.allocate_at(offset, length):
            space.free_range(fresh, seg, offset, length, until)


def drop(
    ms: MasterCore,
    key: str,
    obj: ObjectMeta,
    reason: ev.RemoveReason,
    now: float,
    *,
    keep_pin: bool = False,
) -> None:
    """Take an object out of every table (the one way an object leaves) and say why.

    Its ranges are held while a reader may still read them (:func:`.space.reader_hold`),
    or, for a write discarded unfinished by anyone but its writer (timed out, forced
    remove), while the writer may still be writing them (:func:`.space.writer_hold`)."""
    hold = space.reader_hold(ms, obj, now)
    writing = False
    if not obj.complete and reason is not ev.RemoveReason.REVOKED:
        started = ms.objects.processing.get(key)
        if started is not None:
            hold = space.writer_hold(ms, started, now)
            writing = hold is not None
    # The ranges this drop leaves held (its replicas', and a deferred replica drop's)
    # go into its event: the journal keeps them for a restored master.
    before = set(ms.held.ranges) if hold is not None or key in ms.moves.dropping else None
    if ms.moves.involves(key):
        replica_ops.forget_moves(ms, key, now)
    space.forget_tier(ms, key, obj, now)
    space.release(ms, key, obj.replicas, hold_until=hold)
    ms.objects.remove(key)
    if not keep_pin and ms.pins.clear(key, is_prefix=False) is not None:
        ms.events.append(ev.ObjectUnpinned(now, key, False, expired=False))
    held: tuple[Replica, ...] = ()
    if before is not None:
        held = tuple(
            (Slice(name, off, ms.held.ranges[(name, off)].length),)
            for name, off in sorted(set(ms.held.ranges) - before)
        )
    ms.events.append(ev.ObjectRemoved(now, key, reason, obj.complete, held, writing))


def check_removable(ms: MasterCore, key: str, obj: ObjectMeta, now: float) -> None:
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


def remove_many(ms: MasterCore, keys: list[str], now: float, force: bool) -> RemoveManyResult:
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


class RemovalApi(MasterCore):
    """Removals: one key, by prefix, by regex, all. Part of :class:`~.state.MasterState`."""

    def remove(self, key: str, now: float, *, force: bool = False) -> None:
        """Remove one object.

        A forced remove of a leased object takes it out of the tables at once but holds
        its ranges until the lease ends (``tick`` frees them): a reader that got its
        replica list keeps valid bytes for its whole lease.

        Raises:
            NotFoundError: no such object.
            ConflictError: leased (OBJECT_LEASED) or being written (OBJECT_NOT_READY),
                unless ``force``.
        """
        remove(self, key, now, force=force)

    def remove_by_prefix(self, prefix: str, now: float, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object whose key starts with ``prefix``.

        Raises:
            InvalidArgumentError: empty prefix (use :meth:`remove_all`).
        """
        return remove_by_prefix(self, prefix, now, force=force)

    def remove_by_regex(self, pattern: str, now: float, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object whose key matches ``pattern`` (``re.search``).

        Raises:
            InvalidArgumentError: the pattern does not compile (the message says why).
        """
        return remove_by_regex(self, pattern, now, force=force)

    def remove_all(self, now: float, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object."""
        return remove_all(self, now, force=force)

    def batch_remove(
        self, keys: Sequence[str], now: float, *, force: bool = False
    ) -> list[StoreError | None]:
        """:meth:`remove` for each key."""
        return each(keys, lambda k: self.remove(k, now, force=force))
