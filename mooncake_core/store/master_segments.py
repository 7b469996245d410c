"""Segments in the master's core: mount, unmount, drain, client expiry. Sans-IO.

Segment lifecycle (see :mod:`.segment`): a removed segment takes its DRAM ranges and
its node's SSD copies with it; objects keep living on their other replicas or SSD
copies, or are lost. Functions take the :class:`MasterState` they work on; its public
methods delegate here and document the behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import events as ev
from . import master_removal as removal_ops
from . import master_replicas as replica_ops
from . import master_tier_ops as tier_ops
from .errors import ConflictError, ErrorCode, InvalidArgumentError
from .results import KeyEntry, ListKeysResult
from .segment import Segment, SegmentSnapshot, SegmentState
from .validation import check_name, check_transport_address

if TYPE_CHECKING:
    from .master_state import MasterState

MAX_LIST_LIMIT = 100_000
MAX_SEGMENT_CAPACITY = 1 << 48
"""Largest segment accepted (256 TiB): capacities are summed into uint64 totals."""
MAX_TOTAL_CAPACITY = 1 << 62
"""Largest sum of mounted capacities; keeps every total and ratio inside uint64."""
MAX_SSD_CAPACITY = 1 << 56
"""Largest SSD tier behind one segment (64 PiB)."""


def mount(
    ms: MasterState,
    name: str,
    client_id: str,
    capacity: int,
    now: float,
    *,
    transport_address: str = "",
    location: str = "cpu:0",
    ssd_capacity: int = 0,
) -> SegmentSnapshot:
    """Body of :meth:`MasterState.mount_segment`."""
    check_name("segment name", name)
    check_name("client_id", client_id)
    check_transport_address(transport_address)
    if not isinstance(capacity, int) or not 0 < capacity <= MAX_SEGMENT_CAPACITY:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"segment capacity must be in 1..{MAX_SEGMENT_CAPACITY} bytes, got {capacity!r}",
        )
    if not isinstance(ssd_capacity, int) or not 0 <= ssd_capacity <= MAX_SSD_CAPACITY:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"ssd_capacity must be in 0..{MAX_SSD_CAPACITY} bytes, got {ssd_capacity!r}",
        )
    seg = ms.segments.find(name)
    if seg is not None:
        if (
            seg.client_id == client_id
            and seg.capacity == capacity
            and seg.ssd_capacity == ssd_capacity
            and seg.state == SegmentState.MOUNTED
        ):
            ms.segments.touch_client(client_id, now)
            return seg.snapshot()
        raise ConflictError(
            ErrorCode.SEGMENT_ALREADY_EXISTS,
            f"segment {name!r} is already mounted by client {seg.client_id!r} "
            f"({seg.state.name}, {seg.capacity} bytes)",
        )
    if ms.segments.capacity() + capacity > MAX_TOTAL_CAPACITY:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"mounting {capacity} bytes would take the store past {MAX_TOTAL_CAPACITY} bytes",
        )
    seg = ms.segments.add(name, client_id, capacity, transport_address, location, ssd_capacity)
    ms.segments.touch_client(client_id, now)
    ms.events.append(ev.SegmentMounted(now, name, client_id, capacity))
    return seg.snapshot()


def unmount(ms: MasterState, name: str, now: float, *, client_id: str | None = None) -> None:
    """Body of :meth:`MasterState.unmount_segment`."""
    seg = ms.segments.get(name)
    if client_id is not None and seg.client_id != client_id:
        raise ConflictError(
            ErrorCode.INVALID_STATE,
            f"segment {name!r} belongs to client {seg.client_id!r}, not {client_id!r}",
        )
    if seg.state == SegmentState.UNMOUNTING:
        return
    if ms.config.unmount_grace_s <= 0:
        remove_segment(ms, seg, ev.UnmountReason.UNMOUNTED, now)
        return
    seg.state = SegmentState.UNMOUNTING
    seg.unmount_deadline = now + ms.config.unmount_grace_s
    ms.events.append(ev.SegmentStateChanged(now, name, seg.state.name))


def drain(ms: MasterState, name: str, now: float) -> None:
    """Body of :meth:`MasterState.drain_segment`."""
    seg = ms.segments.get(name)
    if seg.state in (SegmentState.DRAINING, SegmentState.DRAINED):
        return
    if seg.state != SegmentState.MOUNTED:
        raise ConflictError(
            ErrorCode.INVALID_STATE, f"segment {name!r} is {seg.state.name}, cannot drain"
        )
    seg.state = SegmentState.DRAINING
    ms.events.append(ev.SegmentStateChanged(now, name, seg.state.name))
    update_drain(ms, seg, now)


def undrain(ms: MasterState, name: str, now: float) -> None:
    """Body of :meth:`MasterState.undrain_segment`."""
    seg = ms.segments.get(name)
    if seg.state == SegmentState.MOUNTED:
        return
    if seg.state not in (SegmentState.DRAINING, SegmentState.DRAINED):
        raise ConflictError(
            ErrorCode.INVALID_STATE, f"segment {name!r} is {seg.state.name}, cannot undrain"
        )
    seg.state = SegmentState.MOUNTED
    ms.events.append(ev.SegmentStateChanged(now, name, seg.state.name))


def list_objects(
    ms: MasterState, segment: str, start_after: str = "", limit: int = 1000
) -> ListKeysResult:
    """Body of :meth:`MasterState.list_segment_objects`."""
    seg = ms.segments.get(segment)
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"limit must be in 1..{MAX_LIST_LIMIT}, got {limit}"
        )
    entries: list[KeyEntry] = []
    more = False
    for key in sorted(k for k in seg.keys if k > start_after):
        obj = ms.objects[key]
        if not any(sl.segment == segment for r in obj.replicas for sl in r):
            continue
        if len(entries) == limit:
            more = True
            break
        entries.append(KeyEntry(key, obj.size, obj.state))
    return ListKeysResult(tuple(entries), entries[-1].key if more else None)


def expire_clients(ms: MasterState, now: float) -> list[str]:
    """Body of :meth:`MasterState.expire_clients`."""
    if now < ms.expiry_hold_until:
        return []
    ttl = ms.config.client_ttl_s
    dead = ms.segments.silent_clients(now, ttl)
    for client in dead:
        ms.segments.forget_client(client)
        for seg in ms.segments.owned_by(client):
            remove_segment(ms, seg, ev.UnmountReason.CLIENT_EXPIRED, now)
        ms.events.append(ev.ClientExpired(now, client))
    return dead


def finish_unmounts(ms: MasterState, now: float) -> list[str]:
    """Body of :meth:`MasterState.finish_unmounts`."""
    done = ms.segments.due_unmounts(now)
    for seg in done:
        remove_segment(ms, seg, ev.UnmountReason.UNMOUNTED, now)
    return [s.name for s in done]


def remove_segment(ms: MasterState, seg: Segment, reason: ev.UnmountReason, now: float) -> None:
    """Remove a segment now: its SSD copies, then its DRAM ranges; objects left with no copy are lost."""
    name = seg.name
    ms.tier.offload_idle.pop(name, None)
    # The node and its disk go with the segment: first its SSD copies, then its
    # DRAM ranges (an object keeps living on other SSD copies if it has some).
    for key in sorted(seg.ssd_keys):
        obj = ms.objects[key]
        tier_ops.drop_ssd(ms, key, obj, name, now)
        st = ms.tier.stages.get(key)
        if st is not None and st.segment == name:
            continue  # the pending stage is failed below, with the segment's ranges
        if not obj.replicas and not obj.ssd and key not in ms.tier.stages:
            removal_ops.drop(ms, key, obj, ev.RemoveReason.SEGMENT_LOST, now)
            ms.counters.lost += 1
    for key in sorted(seg.keys):
        obj_or_none = ms.objects.get(key)
        if obj_or_none is None:
            continue  # removed above (its last SSD copy was here)
        obj = obj_or_none
        if ms.moves.involves(key):
            replica_ops.forget_moves(ms, key, now, name)
        ms.tier.clear_offload(key, name)
        st = ms.tier.stages.get(key)
        if st is not None and st.segment == name:
            del ms.tier.stages[key]
            tier_ops.stage_failed(ms, key, obj, st, now)
            continue
        if not any(sl.segment == name for r in obj.replicas for sl in r):
            continue  # only a pending move touched this segment
        keep = tuple(r for r in obj.replicas if all(sl.segment != name for sl in r))
        lost = [r for r in obj.replicas if any(sl.segment == name for sl in r)]
        if keep or obj.ssd:
            still = {sl.segment for r in keep for sl in r}
            removal_ops.release(ms, key, lost, keep=still)
            obj.replicas = keep
            copy = ms.tier.stage_copies.get(key)
            if copy is not None and copy in lost:
                del ms.tier.stage_copies[key]
            if not keep:
                ms.ssd_only.add(key)
            ms.events.append(ev.ReplicaDropped(now, key, name, len(keep)))
        else:
            removal_ops.drop(ms, key, obj, ev.RemoveReason.SEGMENT_LOST, now)
            ms.counters.lost += 1
    ms.segments.remove(name)
    ms.events.append(ev.SegmentUnmounted(now, name, reason))


def update_drain(ms: MasterState, seg: Segment, now: float) -> None:
    """Mark a DRAINING segment DRAINED once it holds no key."""
    if seg.state == SegmentState.DRAINING and not seg.keys:
        seg.state = SegmentState.DRAINED
        ms.events.append(ev.SegmentStateChanged(now, seg.name, seg.state.name))
