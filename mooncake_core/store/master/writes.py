"""Writes in the master's core: PutStart, Upsert, PutEnd, revoke, stale writes. Sans-IO.

A write allocates its replicas (evicting if needed) and installs the object as
PROCESSING, invisible to readers; PutEnd makes it COMPLETE, gives it a fresh version
token and, for a pinned object on a segment with an SSD tier, asks for a write-through
copy. Functions take the :class:`~.core.MasterCore` they work on; the operations of
:class:`~.state.MasterState` at the end of the module call them and document the
behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from .. import events as ev
from ..errors import ConflictError, ErrorCode, StoreError
from ..objects import ObjectMeta, ObjectState, PinLevel, Replica, Slice
from ..placement import allocate_in, healthy
from ..results import ReplicateConfig
from ..segment import Segment
from ..validation import MAX_NAME, each, pin_expiry, validate_put
from . import eviction as evict_ops
from . import removal as removal_ops
from . import tier as tier_ops
from .core import MasterCore


def put_start(
    ms: MasterCore,
    key: str,
    size: int,
    client_id: str,
    now: float,
    config: ReplicateConfig | None = None,
    placer: evict_ops.Placer | None = None,
) -> tuple[Replica, ...]:
    """Body of :meth:`MasterState.put_start` (``placer``: a batch's, built once)."""
    cfg = config or ReplicateConfig()
    segs = placer.segs if placer is not None else ms.segments.allocatable()
    replica_num = validate_put(ms.config, key, size, client_id, cfg, len(segs))
    refuse_existing(ms, key)
    if placer is None:
        placer = evict_ops.Placer(ms, segs, client_id, cfg)
    replicas = placer.allocate(key, size, replica_num, now, ())
    install(ms, key, size, replicas, client_id, cfg, now)
    return replicas


def refuse_existing(ms: MasterCore, key: str) -> None:
    """ConflictError OBJECT_ALREADY_EXISTS if ``key`` exists (complete or being written):
    a new object's key must be free."""
    existing = ms.objects.get(key)
    if existing is not None:
        raise ConflictError(
            ErrorCode.OBJECT_ALREADY_EXISTS,
            f"object {key!r} already exists ({existing.state.name})",
        )


def batch_put_start(
    ms: MasterCore,
    items: Sequence[tuple[str, int]],
    client_id: str,
    now: float,
    config: ReplicateConfig | None,
) -> list[tuple[Replica, ...] | StoreError]:
    """Body of :meth:`MasterState.batch_put_start`: one :class:`~.eviction.Placer` for
    every key (the segments, bounds and strategy do not change within the call)."""
    cfg = config or ReplicateConfig()
    segs = ms.segments.allocatable()
    placer = evict_ops.Placer(ms, segs, client_id, cfg) if segs else None
    if placer is None or not plain(ms, cfg, client_id):
        return each(items, lambda it: put_start(ms, it[0], it[1], client_id, now, cfg, placer))
    # The common write, one replica of one slice, placed and installed as put_start
    # would (the same checks pass, the same one strategy call), without its layers; an
    # item it is unsure of (a check that may fail, no room without evicting) takes
    # put_start's path, which raises or evicts as documented.
    conf = ms.config
    max_key = conf.max_key_length
    max_size = min(conf.max_slice_size, conf.max_object_size)
    by_key = ms.objects
    place = plain_place(placer)
    out: list[tuple[Replica, ...] | StoreError] = []
    for key, size in items:
        if (
            type(key) is str
            and type(size) is int
            and 0 < len(key) <= max_key
            and 0 < size <= max_size
            and key.isascii()
            and key not in by_key
        ):
            placed = place(size)
            if placed is not None:
                seg, replicas = placed
                by_key.add(key, ObjectMeta(size, replicas, client_id, now), processing_since=now)
                seg.keys.add(key)
                out.append(replicas)
                continue
        try:
            out.append(put_start(ms, key, size, client_id, now, cfg, placer))
        except StoreError as exc:
            out.append(exc)
    return out


def plain_place(
    placer: evict_ops.Placer,
) -> Callable[[int], tuple[Segment, tuple[Replica, ...]] | None]:
    """Place one replica of one slice of a given size in the free space as it is (the
    candidates and the one strategy call of :meth:`~.eviction.Placer.place`, set up
    once for a batch): its segment and replicas, or None when it does not fit. Only for
    writes that are :func:`plain` and sizes within ``max_slice_size``."""
    pool = healthy(placer.segs, 1, placer.ctx)
    choose, ctx = placer.strategy.choose, placer.ctx

    def place(size: int) -> tuple[Segment, tuple[Replica, ...]] | None:
        cands = [s for s in pool if s.allocator.fits(size)]
        if not cands:
            return None
        seg = choose(cands, size, ctx)
        return seg, ((Slice(seg.name, allocate_in(seg, size), size),),)

    return place


def plain(ms: MasterCore, cfg: ReplicateConfig, client_id: str) -> bool:
    """Whether a batch's writes are the common kind: one replica, no pin, a valid
    writer (what validate_put checks of the batch as a whole passes)."""
    n = ms.config.default_replica_num if cfg.replica_num is None else cfg.replica_num
    return (
        n == 1
        and not cfg.hard_pin
        and not cfg.soft_pin
        and isinstance(client_id, str)
        and 0 < len(client_id) <= MAX_NAME
    )


def upsert_start(
    ms: MasterCore,
    key: str,
    size: int,
    client_id: str,
    now: float,
    config: ReplicateConfig | None = None,
) -> tuple[Replica, ...]:
    """Body of :meth:`MasterState.upsert_start`."""
    cfg = config or ReplicateConfig()
    segs = ms.segments.allocatable()
    replica_num = validate_put(ms.config, key, size, client_id, cfg, len(segs))
    old = ms.objects.get(key)
    if old is None:
        return put_start(ms, key, size, client_id, now, cfg)
    if not old.complete:
        raise ConflictError(
            ErrorCode.INVALID_STATE, f"object {key!r} is being written; cannot upsert"
        )
    if old.leased(now):
        raise ConflictError(
            ErrorCode.OBJECT_LEASED,
            f"object {key!r} is leased for {old.lease_expiry - now:.3f} s more",
        )
    replicas = evict_ops.allocate(ms, segs, key, size, replica_num, client_id, cfg, now, (key,))
    removal_ops.drop(ms, key, old, ev.RemoveReason.REPLACED, now, keep_pin=True)
    install(ms, key, size, replicas, client_id, cfg, now)
    return replicas


def put_end(ms: MasterCore, key: str, now: float) -> None:
    """Body of :meth:`MasterState.put_end`."""
    obj = ms.objects.require(key)
    if obj.complete:
        raise ConflictError(ErrorCode.INVALID_STATE, f"object {key!r} is already complete")
    obj.state = ObjectState.COMPLETE
    obj.last_access = now
    obj.token = ms.tier.new_token()
    ms.objects.mark_complete(key)
    ms.objects.touch(key, obj)
    ms.tier.changes += 1
    ms.events.append(ev.ObjectStored(now, key, obj.size, obj.replicas))
    # Cheap test first: most stores have no SSD tier, and the pin lookup walks the
    # prefix pins.
    if tier_ops.on_ssd_segment(ms, obj) and ms.pins.level(key, now)[0] != PinLevel.NONE:
        tier_ops.write_through(ms, key, obj, now)


def put_revoke(ms: MasterCore, key: str, now: float) -> None:
    """Body of :meth:`MasterState.put_revoke`."""
    obj = ms.objects.require(key)
    if obj.complete:
        raise ConflictError(
            ErrorCode.INVALID_STATE, f"object {key!r} is complete; use remove, not revoke"
        )
    removal_ops.drop(ms, key, obj, ev.RemoveReason.REVOKED, now)


def discard_stale_puts(ms: MasterCore, now: float) -> list[str]:
    """Body of :meth:`MasterState.discard_stale_puts`."""
    limit = now - ms.config.put_timeout_s
    stale = []
    for key, started in ms.objects.processing.items():
        if started > limit:
            break  # insertion order is start order
        stale.append(key)
    for key in stale:
        removal_ops.drop(ms, key, ms.objects[key], ev.RemoveReason.EXPIRED, now)
        ms.counters.expired_puts += 1
    return stale


def install(
    ms: MasterCore,
    key: str,
    size: int,
    replicas: tuple[Replica, ...],
    client_id: str,
    cfg: ReplicateConfig,
    now: float,
) -> None:
    """Register a new PROCESSING object at ``replicas`` (and the key pin it asked for)."""
    ms.objects.add(key, ObjectMeta(size, replicas, client_id, now), processing_since=now)
    for replica in replicas:
        for sl in replica:
            ms.segments.get(sl.segment).keys.add(key)
    if cfg.hard_pin or cfg.soft_pin:
        expires = pin_expiry(ms.config, cfg.hard_pin, cfg.soft_pin_ttl_s, now)
        ms.pins.set(key, is_prefix=False, hard=cfg.hard_pin, expires_at=expires)
        ms.events.append(ev.ObjectPinned(now, key, False, cfg.hard_pin, expires))


class WritesApi(MasterCore):
    """Writes: PutStart, Upsert, PutEnd, revoke, stale writes, and their batches.

    Part of :class:`~.state.MasterState`.
    """

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
            return put_start(self, key, size, client_id, now, config)
        self.segments.report_unreachable(avoid, now)
        with self.segments.avoiding(avoid):
            return put_start(self, key, size, client_id, now, config)

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
            return upsert_start(self, key, size, client_id, now, config)
        self.segments.report_unreachable(avoid, now)
        with self.segments.avoiding(avoid):
            return upsert_start(self, key, size, client_id, now, config)

    def put_end(self, key: str, now: float) -> None:
        """Mark a written object COMPLETE: readable from now on.

        Raises:
            NotFoundError: no such object (never started, revoked, or expired).
            ConflictError: the object is already complete.
        """
        put_end(self, key, now)

    def put_revoke(self, key: str, now: float) -> None:
        """Abandon a write: the object and its space are released.

        Raises:
            NotFoundError: no such object.
            ConflictError: the object is already complete (use remove).
        """
        put_revoke(self, key, now)

    def discard_stale_puts(self, now: float) -> list[str]:
        """Drop writes started more than ``put_timeout_s`` ago and never ended.

        Returns:
            Their keys, oldest first.
        """
        return discard_stale_puts(self, now)

    def batch_put_start(
        self,
        items: Sequence[tuple[str, int]],
        client_id: str,
        now: float,
        config: ReplicateConfig | None = None,
    ) -> list[tuple[Replica, ...] | StoreError]:
        """:meth:`put_start` for each ``(key, size)``; each item succeeds or fails alone."""
        return batch_put_start(self, items, client_id, now, config)

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
