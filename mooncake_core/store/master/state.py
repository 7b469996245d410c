"""The master's metadata core: segments, objects, leases, pins, eviction. Sans-IO.

Every method takes ``now`` (the master's monotonic clock, in seconds) and does no I/O,
starts no threads and reads no clock; the gRPC service and the tests drive the same
object. Every change appends typed events (see :mod:`..events`) that the caller drains
with :meth:`MasterState.take_events`.

A call that raises leaves the tables as they were, with one documented exception: a
PutStart/Upsert that fails for lack of space may have evicted objects on the way (those
evictions are real and reported as events; the failed write itself left no trace).

``MasterState`` is :class:`~.core.MasterCore` (the tables) plus the operations of each
area, one class per module: :class:`~.segments.SegmentsApi`,
:class:`~.writes.WritesApi`, :class:`~.grants.GrantsApi`, :class:`~.replicas.ReplicasApi`,
:class:`~.removal.RemovalApi`, :class:`~.tier_api.TierApi` and
:class:`~.restore.RestoreApi`; reads, pins, ``tick`` and ``snapshot`` are here. Each
operation documents the behaviour and calls the rules of its module (functions taking
the core); the rules call each other only downwards (docs/store.md, "Code layout").

Object table order is recency (least recently used first): PutEnd and GetReplicaList
move a key to the end; Exist and Stat do not, so probing cannot keep objects alive.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import events as ev
from ..errors import ConflictError, ErrorCode, InvalidArgumentError, NotFoundError, StoreError
from ..objects import ObjectInfo, ObjectState
from ..pins import Pin
from ..results import GetResult, KeyEntry, ListKeysResult, MasterSnapshot, ReadRow
from ..validation import check_key, each, pin_expiry
from . import eviction as evict_ops
from . import removal as removal_ops
from . import space
from . import tier as tier_ops
from .grants import GrantsApi
from .removal import RemovalApi
from .replicas import ReplicasApi
from .restore import RestoreApi
from .segments import MAX_LIST_LIMIT, SegmentsApi
from .tier_api import TierApi
from .tier_book import StagePending
from .writes import WritesApi


class MasterState(SegmentsApi, WritesApi, GrantsApi, ReplicasApi, RemovalApi, TierApi, RestoreApi):
    """Metadata of the whole store.

    Args:
        config: master settings (TTLs, watermark, limits, strategy).
        rng: randomness for the ``random`` strategy; inject a seeded one in tests.
        alignment: allocation alignment inside segments (a power of two).
        eviction: eviction policy (default LRU).
    """

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
        return GetResult(key, obj.size, obj.replicas, obj.lease_expiry - now, obj.version)

    def batch_read(
        self, keys: Sequence[str], now: float
    ) -> list[GetResult | StagePending | StoreError]:
        """:meth:`read` for each key; each item succeeds or fails alone."""
        return [
            GetResult(k, *r) if type(r) is tuple else r  # type: ignore[misc]
            for k, r in zip(keys, self.read_rows(keys, now), strict=True)
        ]

    def read_rows(
        self, keys: Sequence[str], now: float
    ) -> list[ReadRow | StagePending | StoreError]:
        """:meth:`batch_read` with each result as a :data:`ReadRow` tuple instead of a
        :class:`GetResult` (the fast channel packs them: a third of the cost).

        The same lease, recency and staging as :meth:`read`: a complete object with a
        DRAM replica is granted here, anything else goes through :meth:`read`.
        """
        out: list[ReadRow | StagePending | StoreError] = []
        objects = self.objects
        until = now + self.config.lease_ttl_s
        for key in keys:
            obj = objects.get(key)
            if obj is None or obj.state is not ObjectState.COMPLETE or not obj.replicas:
                try:
                    r = self.read(key, now)
                except StoreError as exc:
                    out.append(exc)
                    continue
                out.append(
                    r
                    if isinstance(r, StagePending)
                    else (r.size, r.replicas, r.lease_ttl_s, r.version)
                )
                continue
            # As read() grants it.
            obj.lease_expiry = max(obj.lease_expiry, until)
            obj.last_access = now
            objects.touch(key, obj)
            out.append((obj.size, obj.replicas, obj.lease_expiry - now, obj.version))
        return out

    def batch_get_replica_list(
        self, keys: Sequence[str], now: float
    ) -> list[GetResult | StoreError]:
        """:meth:`get_replica_list` for each key."""
        return each(keys, lambda k: self.get_replica_list(k, now))

    def batch_exist(self, keys: Sequence[str], now: float) -> list[bool]:
        """:meth:`exist` for each key."""
        return [self.exist(k, now) for k in keys]

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

    # ------------------------------------------------------------ maintenance
    def tick(self, now: float) -> None:
        """Periodic upkeep, in this order: suspect segments (missed heartbeats), client
        expiry, unmount grace, stale puts and grants, stale replica additions, dropped replicas
        whose lease ended, held ranges whose readers are done, pin TTLs, drain completion, SSD tier (stage timeouts, stage
        copies whose lease ended, offloads ahead of eviction), watermark eviction."""
        self.segments.update_suspects(now)
        self.expire_clients(now)
        self.finish_unmounts(now)
        self.discard_stale_puts(now)
        self.discard_stale_grants(now)
        self.discard_stale_adds(now)
        self.finish_replica_drops(now)
        removal_ops.finish_held(self, now)
        self.expire_pins(now)
        for seg in self.segments:
            space.update_drain(self, seg, now)
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
            grant_count=len(self.grants),
            granted_bytes=self.grants.bytes(),
        )
