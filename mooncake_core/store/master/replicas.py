"""Replica moves in the master's core: add a replica, drop one. Sans-IO.

See docs/store.md, "Moving replicas". A replica being added is allocated but not in the
object's replica list (readers never see it) until AddReplicaEnd; a dropped replica
leaves the list at once but keeps its space until the read lease that existed at the
drop ends, so readers holding that lease stay valid. Functions take the
:class:`~.core.MasterCore` they work on; the operations of :class:`~.state.MasterState`
at the end of the module call them and document the behaviour.
"""

from __future__ import annotations

from collections.abc import Collection

from .. import events as ev
from ..errors import CapacityError, ConflictError, ErrorCode, NotFoundError
from ..objects import Replica
from ..placement import place_replicas, slice_lengths
from ..strategies import AllocContext
from . import space
from .core import MasterCore


def add_start(
    ms: MasterCore,
    key: str,
    now: float,
    *,
    exclude_segments: Collection[str] = (),
    target_segment: str | None = None,
) -> Replica:
    """Body of :meth:`MasterState.add_replica_start`."""
    obj = ms.objects.require(key)
    if not obj.complete:
        raise ConflictError(ErrorCode.OBJECT_NOT_READY, f"object {key!r} is still being written")
    if key in ms.moves.adding:
        raise ConflictError(ErrorCode.INVALID_STATE, f"a replica of {key!r} is already being added")
    if not obj.replicas:
        raise ConflictError(
            ErrorCode.INVALID_STATE,
            f"object {key!r} is only on SSD ({', '.join(obj.ssd)}); read it to stage it first",
        )
    used = {sl.segment for r in obj.replicas for sl in r}
    if target_segment is not None:
        seg = ms.segments.get(target_segment)
        if not seg.allocatable:
            raise ConflictError(
                ErrorCode.INVALID_STATE,
                f"segment {target_segment!r} is {seg.state.name}, not allocatable",
            )
        if target_segment in used:
            raise ConflictError(
                ErrorCode.INVALID_STATE,
                f"segment {target_segment!r} already holds a replica of {key!r}",
            )
        segs = [seg]
    else:
        banned = used | set(exclude_segments)
        segs = [s for s in ms.segments.allocatable() if s.name not in banned]
    if not segs:
        raise CapacityError(
            ErrorCode.NO_AVAILABLE_SEGMENT,
            f"no allocatable segment for another replica of {key!r} "
            f"(excluded: {sorted(used | set(exclude_segments))})",
        )
    lengths = slice_lengths(obj.size, ms.config.max_slice_size)
    placed = place_replicas(segs, lengths, 1, ms.strategy, AllocContext(obj.client_id))
    if placed is None:
        raise CapacityError(
            ErrorCode.STORE_FULL,
            f"no space for another replica of {key!r} ({obj.size} bytes) on "
            f"{len(segs)} allocatable segment(s)",
        )
    replica = placed[0]
    ms.moves.adding[key] = (replica, now)
    for sl in replica:
        ms.segments.get(sl.segment).keys.add(key)
    return replica


def add_end(ms: MasterCore, key: str, now: float) -> Replica:
    """Body of :meth:`MasterState.add_replica_end`."""
    replica = pending_add(ms, key)[0]
    del ms.moves.adding[key]
    obj = ms.objects[key]
    obj.replicas = (*obj.replicas, replica)
    ms.tier.changes += 1
    ms.events.append(ev.ReplicaAdded(now, key, replica, len(obj.replicas)))
    return replica


def add_revoke(ms: MasterCore, key: str, now: float) -> None:
    """Body of :meth:`MasterState.add_replica_revoke`."""
    replica = pending_add(ms, key)[0]
    del ms.moves.adding[key]
    space.free_replica(ms, key, replica, now)


def discard_stale_adds(ms: MasterCore, now: float) -> list[str]:
    """Body of :meth:`MasterState.discard_stale_adds`."""
    limit = now - ms.config.put_timeout_s
    stale = []
    for key, (_, started) in ms.moves.adding.items():
        if started > limit:
            break  # insertion order is start order
        stale.append(key)
    for key in stale:
        # The copier may have stalled mid-transfer: its range stays held.
        replica, started = ms.moves.adding.pop(key)
        space.free_replica(ms, key, replica, now, space.writer_hold(ms, started, now))
    return stale


def drop(ms: MasterCore, key: str, segment: str, now: float) -> bool:
    """Body of :meth:`MasterState.drop_replica`."""
    obj = ms.objects.require(key)
    if not obj.complete:
        raise ConflictError(ErrorCode.OBJECT_NOT_READY, f"object {key!r} is still being written")
    gone = [r for r in obj.replicas if any(sl.segment == segment for sl in r)]
    if not gone:
        raise NotFoundError(
            ErrorCode.OBJECT_NOT_FOUND, f"object {key!r} has no replica on {segment!r}"
        )
    keep = tuple(r for r in obj.replicas if r not in gone)
    if not keep:
        raise ConflictError(
            ErrorCode.INVALID_STATE,
            f"dropping {key!r} from {segment!r} would leave no replica; add one first",
        )
    obj.replicas = keep
    ms.events.append(ev.ReplicaDropped(now, key, segment, len(keep)))
    until = space.reader_hold(ms, obj, now)
    if until is not None:
        pending = ms.moves.dropping.setdefault(key, [])
        pending.extend((until, r) for r in gone)
        return False
    for r in gone:
        space.free_replica(ms, key, r, now)
    return True


def finish_drops(ms: MasterCore, now: float) -> int:
    """Body of :meth:`MasterState.finish_replica_drops`."""
    freed = 0
    for key in list(ms.moves.dropping):
        waiting = ms.moves.dropping[key]
        due = [r for at, r in waiting if at <= now]
        if not due:
            continue
        rest = [(at, r) for at, r in waiting if at > now]
        if rest:
            ms.moves.dropping[key] = rest
        else:
            del ms.moves.dropping[key]
        for r in due:
            space.free_replica(ms, key, r, now)
        freed += len(due)
    return freed


def pending_add(ms: MasterCore, key: str) -> tuple[Replica, float]:
    """The replica being added to ``key`` and its start time; NotFoundError if none."""
    found = ms.moves.adding.get(key)
    if found is None:
        raise NotFoundError(ErrorCode.OBJECT_NOT_FOUND, f"no replica is being added to {key!r}")
    return found


def forget_moves(ms: MasterCore, key: str, now: float, segment: str | None = None) -> None:
    """Release a key's pending addition and deferred drops (all, or only those that
    touch ``segment``). A deferred drop whose lease has not ended stays held (the key is
    going away, not its readers), unless its segment is the one going."""
    add = ms.moves.adding.get(key)
    if add is not None and (segment is None or any(s.segment == segment for s in add[0])):
        del ms.moves.adding[key]
        # The key is going, not the copier writing its new replica: held for it, unless
        # its segment is the one going.
        hold = space.writer_hold(ms, add[1], now) if segment is None else None
        space.free_replica(ms, key, add[0], now, hold)
    waiting = ms.moves.dropping.get(key)
    if waiting:
        hit = [
            (at, r) for at, r in waiting if segment is None or any(s.segment == segment for s in r)
        ]
        rest = [w for w in waiting if w not in hit]
        if rest:
            ms.moves.dropping[key] = rest
        else:
            del ms.moves.dropping[key]
        for at, r in hit:
            hold = at if segment is None and at > now else None
            space.free_replica(ms, key, r, now, hold)


class ReplicasApi(MasterCore):
    """Replica moves: add a replica, drop one. Part of :class:`~.state.MasterState`."""

    def add_replica_start(
        self,
        key: str,
        now: float,
        *,
        exclude_segments: Collection[str] = (),
        target_segment: str | None = None,
    ) -> Replica:
        """Allocate one more replica for a COMPLETE object; it stays readable meanwhile.

        The new replica is invisible to readers until :meth:`add_replica_end`; it never
        shares a segment with the object's current replicas. Nothing is evicted for it.

        Args:
            key: the object.
            now: master clock.
            exclude_segments: segments not to use (besides those already holding it).
            target_segment: place the replica on exactly this segment.

        Returns:
            The replica to fill (its slices in object order).

        Raises:
            NotFoundError: no such object or target segment.
            ConflictError: the object is being written (OBJECT_NOT_READY), a replica is
                already being added to it, or the target is not allocatable or already
                holds the object (INVALID_STATE).
            CapacityError: no allocatable segment left (NO_AVAILABLE_SEGMENT) or no space
                (STORE_FULL).
        """
        return add_start(
            self, key, now, exclude_segments=exclude_segments, target_segment=target_segment
        )

    def add_replica_end(self, key: str, now: float) -> Replica:
        """Make the replica being added to ``key`` readable.

        Returns:
            The committed replica.

        Raises:
            NotFoundError: no replica is being added to ``key`` (never started, revoked,
                timed out, or the object or its target segment went away).
        """
        return add_end(self, key, now)

    def add_replica_revoke(self, key: str, now: float) -> None:
        """Abandon the replica being added to ``key``; its space is released.

        Raises:
            NotFoundError: no replica is being added to ``key``.
        """
        add_revoke(self, key, now)

    def discard_stale_adds(self, now: float) -> list[str]:
        """Revoke replica additions started more than ``put_timeout_s`` ago.

        Returns:
            Their keys, oldest first.
        """
        return discard_stale_adds(self, now)

    def drop_replica(self, key: str, segment: str, now: float) -> bool:
        """Remove the replica(s) of ``key`` that touch ``segment``; others must remain.

        The replica leaves the replica list at once (new readers never see it). If a read
        lease is outstanding, its space stays reserved until that lease ends (readers
        that were handed the replica keep a valid copy for the whole lease); otherwise it
        is freed now.

        Returns:
            True when the space was freed now, False when it waits for the lease.

        Raises:
            NotFoundError: no such object, or it has no replica on ``segment``.
            ConflictError: the object is being written (OBJECT_NOT_READY), or the drop
                would leave it without a replica (INVALID_STATE).
        """
        return drop(self, key, segment, now)

    def finish_replica_drops(self, now: float) -> int:
        """Free dropped replicas whose lease has ended; returns how many."""
        return finish_drops(self, now)
