"""Giving DRAM ranges back in the master's core: release now, or hold for readers. Sans-IO.

The lowest rules, shared by every module that takes a replica away (removal, replica
moves, eviction, the SSD tier): a range a reader may still be reading is *held*
(:class:`.tables.HeldRanges`) until its lease ends instead of freed, and so is a range a
stalled writer may still be writing (a write discarded unfinished) until
``put_release_s`` after it was handed out; a segment's key set and drain state follow
the replicas that touch it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .. import events as ev
from ..objects import ObjectMeta, Replica
from ..segment import Segment, SegmentState
from .core import MasterCore
from .tables import Grant


def reader_hold(ms: MasterCore, obj: ObjectMeta, now: float) -> float | None:
    """Until when a reader may still read ``obj``'s bytes (its lease, or the hold of an
    object a rebuilt master restored), or None when none can (not leased, or never
    readable)."""
    if not obj.complete:
        return None
    until = max(obj.lease_expiry, obj.read_hold)
    return until if until > now else None


def writer_hold(ms: MasterCore, started: float, now: float) -> float | None:
    """Until when a writer given a range at ``started`` (its PutStart, replica addition
    or SSD stage) may still be writing into it after the master gave up on it:
    ``put_release_s`` from ``started``, or None once that has passed. A range discarded
    unfinished is held until then, never handed to another object sooner."""
    until = started + ms.config.put_release_s
    return until if until > now else None


def free_range(
    ms: MasterCore, seg: Segment, offset: int, length: int, hold_until: float | None
) -> None:
    """Release a range now, or hold it until ``hold_until`` (see :meth:`.tables.HeldRanges.finish`)."""
    if hold_until is None:
        seg.allocator.release(offset, length)
        return
    ms.held.hold(seg, offset, length, hold_until)


def free_grant(ms: MasterCore, g: Grant, hold_until: float | None, gone: str = "") -> None:
    """Give a forgotten grant's ranges back (or hold them until ``hold_until``), except
    on segment ``gone`` (being removed: its ranges go with it)."""
    for sl in g.slices:
        seg = ms.segments.find(sl.segment)
        if seg is not None and sl.segment != gone:
            free_range(ms, seg, sl.offset, sl.length, hold_until)


def release(
    ms: MasterCore,
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


def still_on(ms: MasterCore, key: str) -> set[str]:
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
    ms: MasterCore, key: str, replica: Replica, now: float, hold_until: float | None = None
) -> None:
    """Release a replica no table holds any more (or hold its ranges until
    ``hold_until``); update segment membership."""
    still = still_on(ms, key)
    for sl in replica:
        seg = ms.segments.find(sl.segment)
        if seg is None:
            continue
        free_range(ms, seg, sl.offset, sl.length, hold_until)
        if sl.segment not in still:
            seg.keys.discard(key)
            update_drain(ms, seg, now)


def update_drain(ms: MasterCore, seg: Segment, now: float) -> None:
    """Mark a DRAINING segment DRAINED once it holds no key."""
    if seg.state == SegmentState.DRAINING and not seg.keys:
        seg.state = SegmentState.DRAINED
        ms.events.append(ev.SegmentStateChanged(now, seg.name, seg.state.name))


def forget_tier(ms: MasterCore, key: str, obj: ObjectMeta, now: float) -> None:
    """Forget an object's SSD copies and in-flight tier work (it is being dropped); the
    range of a stage in flight stays held for the node still filling it."""
    st = ms.tier.stages.pop(key, None)
    if st is not None:
        release(ms, key, (st.replica,), hold_until=writer_hold(ms, st.started, now))
    ms.tier.timed_out.pop(key, None)
    ms.tier.stage_copies.pop(key, None)
    ms.tier.clear_offload(key)
    for name in obj.ssd:
        seg = ms.segments.find(name)
        if seg is not None:
            seg.ssd_keys.discard(key)
    ms.ssd_only.discard(key)
