"""The master's metadata core: segments, objects, leases, pins, eviction. Sans-IO.

Every method takes ``now`` (the master's monotonic clock, in seconds) and does no I/O,
starts no threads and reads no clock; the gRPC service and the tests drive the same
object. Every change appends typed events (see :mod:`.events`) that the caller drains
with :meth:`MasterState.take_events`.

A call that raises leaves the tables as they were, with one documented exception: a
PutStart/Upsert that fails for lack of space may have evicted objects on the way (those
evictions are real and reported as events; the failed write itself left no trace).

The rules of each area live in their own module, as functions taking the state:
:mod:`.master_segments` (segment lifecycle), :mod:`.master_writes` (writes),
:mod:`.master_replicas` (replica moves), :mod:`.master_removal` (removals),
:mod:`.master_eviction` (allocation and eviction), :mod:`.master_tier_ops` (SSD tier)
and :mod:`.master_restore` (rebuild). ``MasterState`` owns the tables and is the only
public API; its methods delegate to those modules and document the behaviour.

Object table order is recency (least recently used first): PutEnd and GetReplicaList
move a key to the end; Exist and Stat do not, so probing cannot keep objects alive.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Sequence

from mooncake_core.config.models import MasterConfig

from . import events as ev
from . import master_eviction as evict_ops
from . import master_removal as removal_ops
from . import master_replicas as replica_ops
from . import master_restore
from . import master_segments as segment_ops
from . import master_tier_ops as tier_ops
from . import master_writes as write_ops
from .errors import (
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    NotFoundError,
    StoreError,
)
from .eviction import EvictionPolicy, LruEviction
from .master_restore import RestoredObject
from .master_segments import MAX_LIST_LIMIT
from .master_segments import MAX_SEGMENT_CAPACITY as MAX_SEGMENT_CAPACITY
from .master_segments import MAX_SSD_CAPACITY as MAX_SSD_CAPACITY
from .master_segments import MAX_TOTAL_CAPACITY as MAX_TOTAL_CAPACITY
from .master_tables import HeldRanges, MasterCounters, ObjectTable, ReplicaMoves
from .master_tier import StagePending, TierBook
from .objects import ObjectInfo, PinLevel, Replica
from .pins import Pin, PinTable
from .results import (
    GetResult,
    KeyEntry,
    ListKeysResult,
    MasterSnapshot,
    RemoveManyResult,
    ReplicateConfig,
)
from .segment import SegmentSnapshot
from .segment_table import SegmentTable
from .strategies import (
    make_strategy,
)
from .validation import (
    check_key,
    check_name,
    each,
    pin_expiry,
)


class MasterState:
    """Metadata of the whole store.

    Args:
        config: master settings (TTLs, watermark, limits, strategy).
        rng: randomness for the ``random`` strategy; inject a seeded one in tests.
        alignment: allocation alignment inside segments (a power of two).
        eviction: eviction policy (default LRU).
    """

    def __init__(
        self,
        config: MasterConfig | None = None,
        *,
        rng: random.Random | None = None,
        alignment: int = 64,
        eviction: EvictionPolicy | None = None,
    ) -> None:
        self.config = config or MasterConfig()
        # The tables are public: the master_*.py rule modules change them through their
        # own methods; other code goes through MasterState's methods.
        self.rng = rng if rng is not None else random.Random(0)
        self.strategy = make_strategy(self.config.allocation_strategy, self.rng)
        self.eviction: EvictionPolicy = eviction or LruEviction()
        self.objects = ObjectTable()
        """Every object, least recently used first."""
        self.moves = ReplicaMoves()
        """Replicas being added, and dropped ones waiting for a lease to end."""
        self.held = HeldRanges()
        """Freed ranges kept for readers (docs/store.md, "Reads never see reclaimed bytes")."""
        hb = self.config.heartbeat_interval_s
        # Suspect after missing one heartbeat by half an interval; a reported node only
        # clears itself with a heartbeat sent after the report.
        self.segments = SegmentTable(alignment, suspect_after_s=1.5 * hb, report_hold_s=hb)
        self.expiry_hold_until = float("-inf")
        """No client is expired before this time of the core's clock (a new HA leader
        gives every client it restored time to find it: :meth:`hold_expiry`)."""
        self.pins = PinTable()
        self.events: list[ev.Event] = []
        """Emitted since the last :meth:`take_events`, oldest first."""
        self.counters = MasterCounters()
        self.tier = TierBook()
        """SSD tier work in flight (see master_tier.py)."""
        self.ssd_only: set[str] = set()
        """Complete objects with no DRAM replica, only SSD copies."""

    # ----------------------------------------------------------------- events
    def take_events(self) -> list[ev.Event]:
        """Return and clear the events emitted since the last call, oldest first."""
        out, self.events = self.events, []
        return out

    # ---------------------------------------------------------- clients, segments
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
        return segment_ops.mount(
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
        segment_ops.unmount(self, name, now, client_id=client_id)

    def drain_segment(self, name: str, now: float) -> None:
        """Stop placing on a segment (DRAINING, still readable); DRAINED once it is empty.

        Moving the data elsewhere is the caller's job (read, re-put, remove here).

        Raises:
            NotFoundError: no such segment.
            ConflictError: the segment is unmounting.
        """
        segment_ops.drain(self, name, now)

    def undrain_segment(self, name: str, now: float) -> None:
        """Put a DRAINING or DRAINED segment back into placement (MOUNTED).

        Raises:
            NotFoundError: no such segment.
            ConflictError: the segment is unmounting.
        """
        segment_ops.undrain(self, name, now)

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
        return segment_ops.list_objects(self, segment, start_after, limit)

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
                removal_ops.free_range(self, seg, offset, length, until)
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
        return segment_ops.expire_clients(self, now)

    def finish_unmounts(self, now: float) -> list[str]:
        """Remove segments whose unmount grace period has ended; returns their names."""
        return segment_ops.finish_unmounts(self, now)

    # ----------------------------------------------------------------- writes
    def put_start(
        self,
        key: str,
        size: int,
        client_id: str,
        now: float,
        config: ReplicateConfig | None = None,
        *,
        avoid: Collection[str] = (),
    ) -> tuple[Replica, ...]:
        """Allocate the replicas of a new object (state PROCESSING, invisible to readers).

        Evicts least-recently-used objects if the space is not there.

        Args:
            avoid: segments the writer just failed to reach (a retry after a revoked
                write): this placement leaves them out, and they become suspect for
                every placement until their node heartbeats again.

        Returns:
            The replicas the writer must fill, then call :meth:`put_end`.

        Raises:
            InvalidArgumentError: bad key, size, replica_num or pin options.
            ConflictError: the key exists (complete or being written).
            CapacityError: fewer usable segments than replicas, or no space after eviction.
        """
        if not avoid:
            return write_ops.put_start(self, key, size, client_id, now, config)
        self.segments.report_unreachable(avoid, now)
        with self.segments.avoiding(avoid):
            return write_ops.put_start(self, key, size, client_id, now, config)

    def upsert_start(
        self,
        key: str,
        size: int,
        client_id: str,
        now: float,
        config: ReplicateConfig | None = None,
        *,
        avoid: Collection[str] = (),
    ) -> tuple[Replica, ...]:
        """Like :meth:`put_start`, but an existing complete object is replaced.

        The new space is allocated first (the old value is kept if that fails), then the
        old value is dropped (event reason ``replaced``); key pins carry over.

        Raises:
            ConflictError: the old value is leased (OBJECT_LEASED) or being written.
            Others: as :meth:`put_start`.
        """
        if not avoid:
            return write_ops.upsert_start(self, key, size, client_id, now, config)
        self.segments.report_unreachable(avoid, now)
        with self.segments.avoiding(avoid):
            return write_ops.upsert_start(self, key, size, client_id, now, config)

    def put_end(self, key: str, now: float) -> None:
        """Mark a written object COMPLETE: readable from now on.

        Raises:
            NotFoundError: no such object (never started, revoked, or expired).
            ConflictError: the object is already complete.
        """
        write_ops.put_end(self, key, now)

    def put_revoke(self, key: str, now: float) -> None:
        """Abandon a write: the object and its space are released.

        Raises:
            NotFoundError: no such object.
            ConflictError: the object is already complete (use remove).
        """
        write_ops.put_revoke(self, key, now)

    def discard_stale_puts(self, now: float) -> list[str]:
        """Drop writes started more than ``put_timeout_s`` ago and never ended.

        Returns:
            Their keys, oldest first.
        """
        return write_ops.discard_stale_puts(self, now)

    # --------------------------------------------------------- replica moves
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
        return replica_ops.add_start(
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
        return replica_ops.add_end(self, key, now)

    def add_replica_revoke(self, key: str, now: float) -> None:
        """Abandon the replica being added to ``key``; its space is released.

        Raises:
            NotFoundError: no replica is being added to ``key``.
        """
        replica_ops.add_revoke(self, key, now)

    def discard_stale_adds(self, now: float) -> list[str]:
        """Revoke replica additions started more than ``put_timeout_s`` ago.

        Returns:
            Their keys, oldest first.
        """
        return replica_ops.discard_stale_adds(self, now)

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
        return replica_ops.drop(self, key, segment, now)

    def finish_replica_drops(self, now: float) -> int:
        """Free dropped replicas whose lease has ended; returns how many."""
        return replica_ops.finish_drops(self, now)

    # ------------------------------------------------------------------ reads
    def get_replica_list(self, key: str, now: float) -> GetResult:
        """Where to read ``key``; grants or renews a read lease and counts as an access.

        For callers that cannot wait: an SSD-only object is staged (as :meth:`read`
        does) but the call raises OBJECT_NOT_READY; read again once it settled.

        Raises:
            NotFoundError: no such object.
            ConflictError: OBJECT_NOT_READY, the object is still being written or is
                being staged from SSD.
            CapacityError: an SSD-only object found no DRAM to be staged into.
        """
        r = self.read(key, now)
        if isinstance(r, StagePending):
            raise ConflictError(
                ErrorCode.OBJECT_NOT_READY,
                f"object {key!r} is only on SSD; staging it into segment {r.segment!r} "
                f"(request {r.request_id})",
            )
        return r

    def read(self, key: str, now: float) -> GetResult | StagePending:
        """Where to read ``key`` (lease and access as :meth:`get_replica_list`), or, for
        an object that is only on SSD, the stage that will bring it into DRAM.

        An SSD-only object without a pending stage gets one: a DRAM range on one of its
        SSD segments (evicting other objects if needed, as PutStart does) and a
        ``StageRequested`` event for the node. Wait for :meth:`tier_stage_done` (or the
        stage timeout in :meth:`tick`) and call again; concurrent readers share the one
        pending stage. This call may evict objects even when it raises.

        Raises:
            NotFoundError: no such object.
            ConflictError: OBJECT_NOT_READY, the object is still being written.
            CapacityError: every SSD segment of the object is UNMOUNTING
                (NO_AVAILABLE_SEGMENT) or none has room even after eviction (STORE_FULL).
            UnavailableError: the nodes of all its SSD copies left a stage unanswered
                less than ``stage_timeout_s`` ago (retry later).
        """
        obj = self.objects.require(key)
        if not obj.complete:
            raise ConflictError(
                ErrorCode.OBJECT_NOT_READY, f"object {key!r} is still being written"
            )
        if not obj.replicas:
            pending = self.tier.stages.get(key)
            if pending is None:
                pending = tier_ops.start_stage(self, key, obj, now)
            return StagePending(key, pending.request_id, pending.segment)
        obj.lease_expiry = max(obj.lease_expiry, now + self.config.lease_ttl_s)
        obj.last_access = now
        self.objects.touch(key, obj)
        return GetResult(key, obj.size, obj.replicas, obj.lease_expiry - now)

    def batch_read(
        self, keys: Sequence[str], now: float
    ) -> list[GetResult | StagePending | StoreError]:
        """:meth:`read` for each key; each item succeeds or fails alone."""
        return each(keys, lambda k: self.read(k, now))

    def exist(self, key: str, now: float) -> bool:
        """Whether ``key`` is readable. Neither renews a lease nor counts as an access."""
        obj = self.objects.get(key)
        return obj is not None and obj.complete

    def stat(self, key: str, now: float) -> ObjectInfo:
        """Describe one object without touching its lease or recency.

        Raises:
            NotFoundError: no such object.
        """
        obj = self.objects.require(key)
        level, until = self.pins.level(key, now)
        return ObjectInfo(
            key=key,
            size=obj.size,
            state=obj.state,
            replicas=obj.replicas,
            lease_remaining_s=max(0.0, obj.lease_expiry - now),
            idle_s=now - obj.last_access,
            pin=level,
            pin_remaining_s=None if until is None else until - now,
            ssd_segments=tuple(sorted(obj.ssd)),
        )

    def list_keys(
        self, prefix: str = "", start_after: str = "", limit: int = 1000
    ) -> ListKeysResult:
        """One page of keys under ``prefix`` in key order, after ``start_after``.

        Raises:
            InvalidArgumentError: limit outside 1..100000.
        """
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"limit must be in 1..{MAX_LIST_LIMIT}, got {limit}"
            )
        if start_after and start_after >= prefix:
            it = self.objects.sorted_keys.iter_from(start_after, exclusive=True)
        else:
            it = self.objects.sorted_keys.iter_from(prefix)
        entries: list[KeyEntry] = []
        more = False
        for key in it:
            if not key.startswith(prefix):
                break
            if len(entries) == limit:
                more = True
                break
            obj = self.objects[key]
            entries.append(KeyEntry(key, obj.size, obj.state))
        return ListKeysResult(tuple(entries), entries[-1].key if more else None)

    # --------------------------------------------------------------- removals
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
        removal_ops.remove(self, key, now, force=force)

    def remove_by_prefix(self, prefix: str, now: float, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object whose key starts with ``prefix``.

        Raises:
            InvalidArgumentError: empty prefix (use :meth:`remove_all`).
        """
        return removal_ops.remove_by_prefix(self, prefix, now, force=force)

    def remove_by_regex(self, pattern: str, now: float, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object whose key matches ``pattern`` (``re.search``).

        Raises:
            InvalidArgumentError: the pattern does not compile (the message says why).
        """
        return removal_ops.remove_by_regex(self, pattern, now, force=force)

    def remove_all(self, now: float, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object."""
        return removal_ops.remove_all(self, now, force=force)

    # ------------------------------------------------------------------- pins
    def pin(
        self,
        target: str,
        now: float,
        *,
        prefix: bool = False,
        hard: bool = False,
        ttl_s: float | None = None,
    ) -> Pin:
        """Pin a key (which must exist) or a prefix (also covering later writes).

        Args:
            target: the key or prefix.
            now: master clock.
            prefix: pin every key starting with ``target``.
            hard: never evict; otherwise a soft pin for ``ttl_s``.
            ttl_s: soft pin lifetime; ``None``: ``soft_pin_ttl_s``.

        Raises:
            InvalidArgumentError: empty target, TTL not positive, or TTL on a hard pin.
            NotFoundError: key pin on a key that does not exist.
        """
        if prefix:
            if not target:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS, "empty prefix would pin every object"
                )
        else:
            check_key(target, self.config.max_key_length)
            self.objects.require(target)
        expires = pin_expiry(self.config, hard, ttl_s, now)
        pin = self.pins.set(target, is_prefix=prefix, hard=hard, expires_at=expires)
        self.events.append(ev.ObjectPinned(now, target, prefix, hard, expires))
        if not prefix:
            obj = self.objects[target]
            if obj.complete:
                tier_ops.write_through(self, target, obj, now)
        return pin

    def unpin(self, target: str, now: float, *, prefix: bool = False) -> Pin:
        """Clear the pin set on exactly this key or prefix.

        Returns:
            The pin that was cleared.

        Raises:
            NotFoundError: PIN_NOT_FOUND, nothing pinned there.
        """
        existing = self.pins.get(target, is_prefix=prefix)
        if existing is None or not existing.live(now):
            what = "prefix" if prefix else "key"
            raise NotFoundError(ErrorCode.PIN_NOT_FOUND, f"no pin on {what} {target!r}")
        self.pins.clear(target, is_prefix=prefix)
        self.events.append(ev.ObjectUnpinned(now, target, prefix, expired=False))
        return existing

    def list_pins(self, now: float) -> list[Pin]:
        """Live pins: key pins, then prefix pins, each sorted by target."""
        return self.pins.pins(now)

    def pin_level(self, key: str, now: float) -> PinLevel:
        """Effective pin level of ``key`` (key pin or any covering prefix pin)."""
        return self.pins.level(key, now)[0]

    def expire_pins(self, now: float) -> list[Pin]:
        """Drop soft pins whose TTL ended; returns them."""
        gone = self.pins.expire(now)
        for p in gone:
            self.events.append(ev.ObjectUnpinned(now, p.target, p.is_prefix, expired=True))
        return gone

    # --------------------------------------------------------------- eviction
    def evict_if_needed(self, now: float) -> int:
        """Run one eviction round if usage is above the high watermark.

        Returns:
            Objects evicted.
        """
        return evict_ops.evict_if_needed(self, now)

    # --------------------------------------------------------------- SSD tier
    def tier_offload_done(
        self,
        client_id: str,
        key: str,
        segment: str,
        token: int,
        ok: bool,
        now: float,
        reason: str = "",
    ) -> None:
        """The node of ``segment`` reports an offload it was asked for.

        ``ok``: ``segment`` joins the object's SSD set (event ``SsdCopyAdded``; a
        repeated confirmation is a no-op). Not ok: the offload is asked again after
        ``offload_retry_s``.

        Args:
            client_id: the caller; must own ``segment``.
            key: the object.
            segment: the segment named in ``OffloadRequested``.
            token: the token of that request (the object version that was copied).
            ok: whether the node wrote its file.
            now: master clock.
            reason: the node's words when not ok (unused by the core).

        Raises:
            NotFoundError: no such segment (SEGMENT_NOT_FOUND) or object (the node
                deletes its file).
            InvalidArgumentError: bad key, token 0.
            ConflictError: the segment is another client's or has no SSD tier
                (INVALID_STATE); STALE: the object was rewritten (other token), is not
                complete, or has no replica on ``segment`` any more (the node deletes
                its file).
        """
        tier_ops.offload_done(self, client_id, key, segment, token, ok, now, reason)

    def tier_stage_done(
        self,
        client_id: str,
        key: str,
        segment: str,
        request_id: int,
        ok: bool,
        now: float,
        reason: str = "",
    ) -> None:
        """The node of ``segment`` reports a stage it was asked for.

        ``ok``: the staged range becomes a readable replica (event ``ReplicaAdded``)
        with a fresh read lease for the waiting readers; it is a *stage copy*, dropped
        again once its lease ends, unless this was the object's ``promote_after``-th
        stage (then it stays: promoted). Not ok (``miss``, ``corrupt``): the range is
        freed, ``segment`` leaves the SSD set and the next SSD copy is staged; with
        none left the object is removed (reason ``ssd_lost``).

        Raises:
            NotFoundError: no such segment or object.
            InvalidArgumentError: bad key, request_id 0.
            ConflictError: the segment is another client's (INVALID_STATE); STALE: no
                stage of ``key`` on ``segment`` with this request id is pending (it
                timed out, or the object changed).
        """
        tier_ops.stage_done(self, client_id, key, segment, request_id, ok, now, reason)

    def tier_dropped(
        self, client_id: str, segment: str, keys: Sequence[str], now: float
    ) -> RemoveManyResult:
        """The node of ``segment`` no longer holds SSD files of ``keys`` (evicted for
        room, or found corrupt).

        Keys the master does not know, or knows without an SSD copy on ``segment``, are
        skipped (the node may report a file of an object removed meanwhile). A pending
        stage from that file fails (the next copy is tried). Objects left with no copy
        at all are removed (reason ``ssd_lost``).

        Returns:
            ``removed``: objects removed; ``skipped``: keys that changed nothing.

        Raises:
            NotFoundError: no such segment.
            ConflictError: the segment is another client's (INVALID_STATE).
            InvalidArgumentError: a malformed key (nothing is changed then).
        """
        return tier_ops.dropped(self, client_id, segment, keys, now)

    def expire_stages(self, now: float) -> list[str]:
        """Give up on stages pending longer than ``stage_timeout_s``; returns their keys.

        No answer is not a bad file (the node may have been away, e.g. resubscribing
        after a master restart): the range is freed but the SSD copy is kept; that
        segment is not asked again for ``stage_timeout_s``; another SSD copy is staged
        if there is one. Otherwise the key is reported by :meth:`take_stalled` and reads
        answer UNAVAILABLE until the cool-down ends.
        """
        return tier_ops.expire_stages(self, now)

    def take_stalled(self) -> list[str]:
        """Keys whose stage timed out with no other SSD copy to try since the last call
        (their waiting readers should read again: they get UNAVAILABLE)."""
        out, self.tier.stalled = self.tier.stalled, []
        return out

    def drop_stage_copies(self, now: float) -> int:
        """Drop stage copies whose read lease has ended (their SSD files stay).

        Returns:
            How many were dropped.
        """
        return tier_ops.drop_stage_copies(self, now)

    def request_offloads(self, now: float) -> int:
        """Ask nodes to copy least recently used objects to SSD ahead of eviction.

        For every MOUNTED segment with an SSD tier whose DRAM use is at or above the
        offload watermark: up to ``offload_batch`` complete objects with a replica
        wholly on it, no SSD copy there yet and no offload asked within
        ``offload_retry_s``, least recently used first (event ``OffloadRequested``).

        Returns:
            Offloads requested.
        """
        return tier_ops.request_offloads(self, now)

    # ---------------------------------------------------------------- restore
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
        master_restore.restore_objects(self, objects, now, token_base, read_hold)

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
        master_restore.restore_ssd_copies(self, key, segments)

    # ------------------------------------------------------------------ batch
    def batch_put_start(
        self,
        items: Sequence[tuple[str, int]],
        client_id: str,
        now: float,
        config: ReplicateConfig | None = None,
    ) -> list[tuple[Replica, ...] | StoreError]:
        """:meth:`put_start` for each ``(key, size)``; each item succeeds or fails alone."""
        return each(items, lambda it: self.put_start(it[0], it[1], client_id, now, config))

    def batch_upsert_start(
        self,
        items: Sequence[tuple[str, int]],
        client_id: str,
        now: float,
        config: ReplicateConfig | None = None,
    ) -> list[tuple[Replica, ...] | StoreError]:
        """:meth:`upsert_start` for each ``(key, size)``."""
        return each(items, lambda it: self.upsert_start(it[0], it[1], client_id, now, config))

    def batch_put_end(self, keys: Sequence[str], now: float) -> list[StoreError | None]:
        """:meth:`put_end` for each key."""
        return each(keys, lambda k: self.put_end(k, now))

    def batch_put_revoke(self, keys: Sequence[str], now: float) -> list[StoreError | None]:
        """:meth:`put_revoke` for each key."""
        return each(keys, lambda k: self.put_revoke(k, now))

    def batch_get_replica_list(
        self, keys: Sequence[str], now: float
    ) -> list[GetResult | StoreError]:
        """:meth:`get_replica_list` for each key."""
        return each(keys, lambda k: self.get_replica_list(k, now))

    def batch_exist(self, keys: Sequence[str], now: float) -> list[bool]:
        """:meth:`exist` for each key."""
        return [self.exist(k, now) for k in keys]

    def batch_remove(
        self, keys: Sequence[str], now: float, *, force: bool = False
    ) -> list[StoreError | None]:
        """:meth:`remove` for each key."""
        return each(keys, lambda k: self.remove(k, now, force=force))

    # ------------------------------------------------------------ maintenance
    def tick(self, now: float) -> None:
        """Periodic upkeep, in this order: suspect segments (missed heartbeats), client
        expiry, unmount grace, stale puts, stale replica additions, dropped replicas
        whose lease ended, held ranges whose readers are done, pin TTLs, drain completion, SSD tier (stage timeouts, stage
        copies whose lease ended, offloads ahead of eviction), watermark eviction."""
        self.segments.update_suspects(now)
        self.expire_clients(now)
        self.finish_unmounts(now)
        self.discard_stale_puts(now)
        self.discard_stale_adds(now)
        self.finish_replica_drops(now)
        removal_ops.finish_held(self, now)
        self.expire_pins(now)
        for seg in self.segments:
            segment_ops.update_drain(self, seg, now)
        tier_ops.expire_stages(self, now)
        tier_ops.drop_stage_copies(self, now)
        tier_ops.request_offloads(self, now)
        self.evict_if_needed(now)

    def snapshot(self) -> MasterSnapshot:
        """Immutable read-model; O(segments), never O(objects)."""
        segs = tuple(s.snapshot() for s in self.segments)
        return MasterSnapshot(
            key_count=len(self.objects),
            complete_count=len(self.objects) - len(self.objects.processing),
            processing_count=len(self.objects.processing),
            allocated_bytes=sum(s.used for s in segs),
            total_capacity_bytes=sum(s.capacity for s in segs),
            client_count=self.segments.client_count,
            segments=segs,
            key_pins=self.pins.key_pins,
            prefix_pins=self.pins.prefix_pins,
            evicted_objects_total=self.counters.evicted_objects,
            evicted_bytes_total=self.counters.evicted_bytes,
            eviction_rounds_total=self.counters.eviction_rounds,
            removed_objects_total=self.counters.removed,
            expired_puts_total=self.counters.expired_puts,
            lost_objects_total=self.counters.lost,
            offloaded_evictions_total=self.counters.offloaded_evictions,
            ssd_offloads_total=self.counters.ssd_offloads,
            ssd_stages_total=self.counters.ssd_stages,
            ssd_stage_failures_total=self.counters.ssd_stage_failures,
            ssd_promotions_total=self.counters.ssd_promotions,
            ssd_only_count=len(self.ssd_only),
            ssd_lost_objects_total=self.counters.ssd_lost,
        )
