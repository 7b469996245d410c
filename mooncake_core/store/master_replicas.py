"""Replica moves in the master's core: add a replica, drop one. Sans-IO.

See docs/store.md, "Moving replicas". A replica being added is allocated but not in the
object's replica list (readers never see it) until AddReplicaEnd; a dropped replica
leaves the list at once but keeps its space until the read lease that existed at the
drop ends, so readers holding that lease stay valid. Functions take the
:class:`MasterState` they work on; its public methods delegate here and document the
behaviour.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from . import events as ev
from . import master_removal as removal_ops
from . import master_segments as segment_ops
from .errors import CapacityError, ConflictError, ErrorCode, NotFoundError
from .objects import Replica
from .placement import place_replicas, slice_lengths
from .strategies import AllocContext

if TYPE_CHECKING:
    from .master_state import MasterState


def add_start(
    ms: MasterState,
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


def add_end(ms: MasterState, key: str, now: float) -> Replica:
    """Body of :meth:`MasterState.add_replica_end`."""
    replica = pending_add(ms, key)[0]
    del ms.moves.adding[key]
    obj = ms.objects[key]
    obj.replicas = (*obj.replicas, replica)
    ms.tier.changes += 1
    ms.events.append(ev.ReplicaAdded(now, key, replica, len(obj.replicas)))
    return replica


def add_revoke(ms: MasterState, key: str, now: float) -> None:
    """Body of :meth:`MasterState.add_replica_revoke`."""
    replica = pending_add(ms, key)[0]
    del ms.moves.adding[key]
    free_replica(ms, key, replica, now)


def discard_stale_adds(ms: MasterState, now: float) -> list[str]:
    """Body of :meth:`MasterState.discard_stale_adds`."""
    limit = now - ms.config.put_timeout_s
    stale = []
    for key, (_, started) in ms.moves.adding.items():
        if started > limit:
            break  # insertion order is start order
        stale.append(key)
    for key in stale:
        ms.add_replica_revoke(key, now)
    return stale


def drop(ms: MasterState, key: str, segment: str, now: float) -> bool:
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
    until = removal_ops.reader_hold(ms, obj, now)
    if until is not None:
        pending = ms.moves.dropping.setdefault(key, [])
        pending.extend((until, r) for r in gone)
        return False
    for r in gone:
        free_replica(ms, key, r, now)
    return True


def finish_drops(ms: MasterState, now: float) -> int:
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
            free_replica(ms, key, r, now)
        freed += len(due)
    return freed


def pending_add(ms: MasterState, key: str) -> tuple[Replica, float]:
    """The replica being added to ``key`` and its start time; NotFoundError if none."""
    found = ms.moves.adding.get(key)
    if found is None:
        raise NotFoundError(ErrorCode.OBJECT_NOT_FOUND, f"no replica is being added to {key!r}")
    return found


def still_on(ms: MasterState, key: str) -> set[str]:
    """Segments that some replica of ``key`` (visible, being added, or waiting to be
    freed) still touches."""
    reps: list[Replica] = []
    obj = ms.objects.get(key)
    if obj is not None:
        reps.extend(obj.replicas)
    if key in ms.moves.adding:
        reps.append(ms.moves.adding[key][0])
    reps.extend(r for _, r in ms.moves.dropping.get(key, ()))
    st = ms.tier.stages.get(key)
    if st is not None:
        reps.append(st.replica)
    return {sl.segment for r in reps for sl in r}


def free_replica(
    ms: MasterState, key: str, replica: Replica, now: float, hold_until: float | None = None
) -> None:
    """Release a replica no table holds any more (or hold its ranges until
    ``hold_until``); update segment membership."""
    still = still_on(ms, key)
    for sl in replica:
        seg = ms.segments.find(sl.segment)
        if seg is None:
            continue
        removal_ops.free_range(ms, seg, sl.offset, sl.length, hold_until)
        if sl.segment not in still:
            seg.keys.discard(key)
            segment_ops.update_drain(ms, seg, now)


def forget_moves(ms: MasterState, key: str, now: float, segment: str | None = None) -> None:
    """Release a key's pending addition and deferred drops (all, or only those that
    touch ``segment``). A deferred drop whose lease has not ended stays held (the key is
    going away, not its readers), unless its segment is the one going."""
    add = ms.moves.adding.get(key)
    if add is not None and (segment is None or any(s.segment == segment for s in add[0])):
        del ms.moves.adding[key]
        free_replica(ms, key, add[0], now)
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
            free_replica(ms, key, r, now, hold)
