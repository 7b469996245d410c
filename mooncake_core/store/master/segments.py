"""Segments in the master's core: mount, unmount, drain, client expiry. Sans-IO.

Segment lifecycle (see :mod:`.segment`): a removed segment takes its DRAM ranges and its
node's SSD copies with it; objects keep living on their other replicas or SSD copies, or
are lost. Functions take the :class:`~.core.MasterCore` they work on; the operations of
:class:`~.state.MasterState` at the end of the module call them and document the
behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import events as ev
from ..errors import ConflictError, ErrorCode, InvalidArgumentError
from ..results import KeyEntry, ListKeysResult
from ..segment import Segment, SegmentSnapshot, SegmentState
from ..validation import check_name, check_transport_address
from . import removal as removal_ops
from . import replicas as replica_ops
from . import space
from . import tier as tier_ops
from .core import MasterCore

MAX_LIST_LIMIT = 100_000
MAX_SEGMENT_CAPACITY = 1 << 48
"""Largest segment accepted (256 TiB): capacities are summed into uint64 totals."""
MAX_TOTAL_CAPACITY = 1 << 62
"""Largest sum of mounted capacities; keeps every total and ratio inside uint64."""
MAX_SSD_CAPACITY = 1 << 56
"""Largest SSD tier behind one segment (64 PiB)."""


def mount(
    ms: MasterCore,
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


def unmount(ms: MasterCore, name: str, now: float, *, client_id: str | None = None) -> None:
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


def drain(ms: MasterCore, name: str, now: float) -> None:
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
    # Grants there are withdrawn (nothing new lands on a draining segment; a commit is
    # refused STALE and the writer puts elsewhere). Their ranges there are freed so the
    # segment ends empty; nothing is placed on it until it is undrained, which holds
    # them again for a writer that may still be writing.
    for g in ms.grants.pop_on_segment(name):
        hold = space.writer_hold(ms, g.started, now)
        space.free_grant(ms, g, hold, gone=name)
        for sl in (sl for sl in g.slices if sl.segment == name):
            seg.allocator.release(sl.offset, sl.length)
            if hold is not None:
                ms.grants.remember_released(name, sl.offset, sl.length, hold)
    space.update_drain(ms, seg, now)


def undrain(ms: MasterCore, name: str, now: float) -> None:
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
    for off, length, until in ms.grants.take_released(name):
        if until > now and seg.allocator.allocate_at(off, length):
            ms.held.hold(seg, off, length, until)


def list_objects(
    ms: MasterCore, segment: str, start_after: str = "", limit: int = 1000
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


def expire_clients(ms: MasterCore, now: float) -> list[str]:
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


def finish_unmounts(ms: MasterCore, now: float) -> list[str]:
    """Body of :meth:`MasterState.finish_unmounts`."""
    done = ms.segments.due_unmounts(now)
    for seg in done:
        remove_segment(ms, seg, ev.UnmountReason.UNMOUNTED, now)
    return [s.name for s in done]


def remove_segment(ms: MasterCore, seg: Segment, reason: ev.UnmountReason, now: float) -> None:
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
            space.release(ms, key, lost, keep=still)
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
    for g in ms.grants.pop_on_segment(name):
        # Its writer may still be writing the other segments' slices.
        space.free_grant(ms, g, space.writer_hold(ms, g.started, now), gone=name)
    ms.grants.take_released(name)
    ms.segments.remove(name)
    ms.events.append(ev.SegmentUnmounted(now, name, reason))


class SegmentsApi(MasterCore):
    """Clients and segments: heartbeats, mount, unmount, drain, expiry.

    Part of :class:`~.state.MasterState`.
    """

    def heartbeat(self, client_id: str, now: float) -> bool:
        """Record that ``client_id`` is alive.

        Returns:
            False when the master did not know the client (it expired, or the master
            restarted): the client must mount its segments again.
        """
        check_name("client_id", client_id)
        return self.segments.touch_client(client_id, now)

    def mount_segment(
        self,
        name: str,
        client_id: str,
        capacity: int,
        now: float,
        *,
        transport_address: str = "",
        location: str = "cpu:0",
        ssd_capacity: int = 0,
    ) -> SegmentSnapshot:
        """Add a segment hosted by ``client_id`` (also counts as its heartbeat).

        Mounting the same segment again from the same client with the same capacities
        is a no-op (a client re-mounting after a master restart or a lost reply).

        Args:
            ssd_capacity: bytes of SSD tier the client keeps behind the segment; 0: none.
                With it, the master offloads objects of this segment to that tier.

        Raises:
            InvalidArgumentError: empty/long names, a transport address that is not
                ``host:port`` (empty is allowed: metadata only), capacity not positive,
                ssd_capacity negative or too large.
            ConflictError: the name is taken by another client or is still unmounting.
        """
        return mount(
            self,
            name,
            client_id,
            capacity,
            now,
            transport_address=transport_address,
            location=location,
            ssd_capacity=ssd_capacity,
        )

    def unmount_segment(self, name: str, now: float, *, client_id: str | None = None) -> None:
        """Start unmounting: readable for ``unmount_grace_s``, no new allocations, then gone.

        Raises:
            NotFoundError: no such segment.
            ConflictError: ``client_id`` given and it does not own the segment.
        """
        unmount(self, name, now, client_id=client_id)

    def drain_segment(self, name: str, now: float) -> None:
        """Stop placing on a segment (DRAINING, still readable); DRAINED once it is empty.

        Moving the data elsewhere is the caller's job (read, re-put, remove here).

        Raises:
            NotFoundError: no such segment.
            ConflictError: the segment is unmounting.
        """
        drain(self, name, now)

    def undrain_segment(self, name: str, now: float) -> None:
        """Put a DRAINING or DRAINED segment back into placement (MOUNTED).

        Raises:
            NotFoundError: no such segment.
            ConflictError: the segment is unmounting.
        """
        undrain(self, name, now)

    def list_segment_objects(
        self, segment: str, start_after: str = "", limit: int = 1000
    ) -> ListKeysResult:
        """One page, in key order, of the objects with a readable replica on ``segment``.

        Replicas being added or waiting for a lease to end before they are freed are not
        listed (nothing is left to do for them). Costs O(k log k), k = keys on the segment.

        Raises:
            NotFoundError: no such segment.
            InvalidArgumentError: limit outside 1..100000.
        """
        return list_objects(self, segment, start_after, limit)

    def hold_expiry(self, until: float) -> None:
        """Expire no client before ``until`` (core clock); placement still avoids the
        silent ones (suspect), only their forgetting and data loss waits."""
        self.expiry_hold_until = max(self.expiry_hold_until, until)

    def hold_ranges(self, ranges: Iterable[tuple[str, int, int]], until: float) -> int:
        """Hold free ``(segment, offset, length)`` ranges for readers until ``until``
        (core clock): allocated, unused, released by ``tick`` then. A range that is not
        wholly free in a mounted segment (taken by an object meanwhile) is skipped.

        Returns:
            How many ranges are held.
        """
        held = 0
        for name, offset, length in ranges:
            seg = self.segments.find(name)
            if seg is not None and seg.allocator.allocate_at(offset, length):
                space.free_range(self, seg, offset, length, until)
                held += 1
        return held

    def held_ranges(self) -> list[tuple[str, int, int, float]]:
        """Freed ranges kept allocated for readers: ``(segment, offset, length, free at)``,
        sorted; holds of segments that are gone are left out."""
        return self.held.live(self.segments)

    def expire_clients(self, now: float) -> list[str]:
        """Forget clients silent for ``client_ttl_s``; their segments go at once.

        Returns:
            The expired client ids, sorted.
        """
        return expire_clients(self, now)

    def finish_unmounts(self, now: float) -> list[str]:
        """Remove segments whose unmount grace period has ended; returns their names."""
        return finish_unmounts(self, now)
