"""Allocation and eviction in the master's core. Sans-IO.

A write that does not fit evicts a round of least recently used objects (the policy
decides which; pinned ones are spared, soft-pinned ones only when nothing else is left)
and tries again; ``tick`` evicts a round when usage is above the high watermark. An
object with an SSD copy only loses its DRAM replicas (it stays, SSD-only), and such
objects go first. Functions take the :class:`~.core.MasterCore` they work on.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable

from .. import events as ev
from ..errors import CapacityError, ErrorCode
from ..objects import ObjectMeta, Replica
from ..placement import place_replicas, slice_lengths
from ..results import ReplicateConfig
from ..segment import Segment
from ..strategies import AllocationStrategy, AllocContext, LocalFirstStrategy, PreferredStrategy
from . import removal as removal_ops
from . import replicas as replica_ops
from . import space
from .core import MasterCore


def evict_if_needed(ms: MasterCore, now: float) -> int:
    """Body of :meth:`MasterState.evict_if_needed`."""
    if not over_watermark(ms):
        return 0
    return evict_round(ms, now, (), lambda: over_watermark(ms))


def strategy_for(ms: MasterCore, cfg: ReplicateConfig) -> AllocationStrategy:
    """The allocation strategy a write's options ask for."""
    if cfg.preferred_segments:
        return PreferredStrategy(ms.strategy)
    if cfg.local_first:
        return LocalFirstStrategy(ms.strategy)
    return ms.strategy


class Placer:
    """What placing writes needs that does not change between the objects of one call:
    the usable segments and their capacity bounds, the strategy, the writer, the slice
    lengths per size. A batch builds it once instead of once per key.

    Args:
        ms: the core.
        segs: the usable segments (``ms.segments.allocatable()``; not empty).
        client_id: the writer.
        cfg: the write's options.
    """

    def __init__(
        self, ms: MasterCore, segs: list[Segment], client_id: str, cfg: ReplicateConfig
    ) -> None:
        self.ms = ms
        self.segs = segs
        self.biggest = max(s.capacity for s in segs)
        self.total = sum(s.capacity for s in segs)
        self.strategy = strategy_for(ms, cfg)
        self.ctx = AllocContext(client_id, cfg.preferred_segments)
        self._lengths: dict[int, list[int]] = {}

    def lengths_of(self, size: int) -> list[int]:
        """The slice lengths of an object of ``size`` bytes (computed once per size)."""
        lengths = self._lengths.get(size)
        if lengths is None:
            lengths = self._lengths[size] = slice_lengths(size, self.ms.config.max_slice_size)
        return lengths

    def place(self, size: int, replica_num: int) -> tuple[Replica, ...] | None:
        """One placement in the free space as it is, evicting nothing; None when the
        replicas do not fit (nothing is left allocated then)."""
        return place_replicas(
            self.segs, self.lengths_of(size), replica_num, self.strategy, self.ctx
        )

    def allocate(
        self, key: str, size: int, replica_num: int, now: float, protected: Collection[str]
    ) -> tuple[Replica, ...]:
        """Place the replicas of a write, evicting rounds until they fit; CapacityError
        if they cannot."""
        lengths = self.lengths_of(size)
        if lengths[0] > self.biggest or size * replica_num > self.total:
            # Hopeless even on an empty store: fail without evicting anything.
            raise CapacityError(
                ErrorCode.STORE_FULL,
                f"object {key!r} ({size} bytes x {replica_num} replicas, slices up to "
                f"{lengths[0]} bytes) cannot fit the usable segments (largest "
                f"{self.biggest} bytes, total {self.total} bytes)",
            )
        while True:
            replicas = self.place(size, replica_num)
            if replicas is not None:
                return replicas
            if evict_round(self.ms, now, protected, lambda: True) == 0:
                raise CapacityError(
                    ErrorCode.STORE_FULL,
                    f"no space for object {key!r} ({size} bytes x {replica_num} replicas) "
                    "and nothing left to evict",
                )


def allocate(
    ms: MasterCore,
    segs: list[Segment],
    key: str,
    size: int,
    replica_num: int,
    client_id: str,
    cfg: ReplicateConfig,
    now: float,
    protected: Collection[str],
) -> tuple[Replica, ...]:
    """Place the replicas of one write (:meth:`Placer.allocate`)."""
    return Placer(ms, segs, client_id, cfg).allocate(key, size, replica_num, now, protected)


def over_watermark(ms: MasterCore) -> bool:
    """Whether DRAM use is above the eviction high watermark."""
    total = ms.segments.capacity()
    used = ms.segments.used()
    return total > 0 and used > ms.config.eviction_high_watermark * total


def evict_round(
    ms: MasterCore, now: float, protected: Collection[str], still_needed: Callable[[], bool]
) -> int:
    """Evict one round (``eviction_ratio`` of the DRAM objects, sparing ``protected``); returns how many."""
    in_dram = len(ms.objects) - len(ms.objects.processing) - len(ms.ssd_only)
    target = max(1, math.ceil(ms.config.eviction_ratio * in_dram))
    plan = ms.eviction.plan(
        victim_order(ms),
        now,
        target,
        ms.pin_level,
        ms.config.evict_soft_pinned,
        protected,
    )
    for key in plan.unpinned:
        evict(ms, key, now)
    evicted = len(plan.unpinned)
    # Soft-pinned victims only when unpinned ones did not suffice.
    if plan.soft_pinned and still_needed():
        for key in plan.soft_pinned:
            evict(ms, key, now)
        evicted += len(plan.soft_pinned)
    if evicted:
        ms.counters.eviction_rounds += 1
    return evicted


def victim_order(ms: MasterCore) -> Iterable[tuple[str, ObjectMeta]]:
    """Objects in the order eviction considers them: least recently used first,
    those with an SSD copy (evicting them loses nothing) before the others; SSD-only
    objects hold no DRAM and are left out."""
    items = ms.objects.items()
    if not ssd_any(ms):
        return items
    offloaded = ((k, o) for k, o in items if o.ssd and o.replicas)
    others = ((k, o) for k, o in items if not o.ssd and o.replicas)
    return itertools.chain(offloaded, others)


def ssd_any(ms: MasterCore) -> bool:
    """Whether any object has an SSD copy."""
    return any(s.ssd_keys for s in ms.segments)


def evict(ms: MasterCore, key: str, now: float) -> None:
    """Evict one object: only its DRAM if it has an SSD copy, otherwise the object."""
    obj = ms.objects[key]
    if obj.ssd and obj.replicas:
        evict_to_ssd(ms, key, obj, now)
        return
    ms.counters.evicted_objects += 1
    ms.counters.evicted_bytes += obj.size * len(obj.replicas)
    removal_ops.drop(ms, key, obj, ev.RemoveReason.EVICTED, now)


def evict_to_ssd(ms: MasterCore, key: str, obj: ObjectMeta, now: float) -> None:
    """Free the DRAM of an object that has an SSD copy; it stays, SSD-only."""
    if ms.moves.involves(key):
        replica_ops.forget_moves(ms, key, now)
    replicas = obj.replicas
    obj.replicas = ()
    ms.tier.stage_copies.pop(key, None)
    ms.tier.clear_offload(key)
    space.release(ms, key, replicas, hold_until=space.reader_hold(ms, obj, now))
    for left, r in enumerate(reversed(replicas)):
        ms.events.append(ev.ReplicaDropped(now, key, r[0].segment, left))
    ms.ssd_only.add(key)
    ms.counters.offloaded_evictions += 1
    ms.counters.evicted_bytes += obj.size * len(replicas)
