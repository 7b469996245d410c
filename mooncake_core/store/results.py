"""Small immutable request options and results of the master core."""

from __future__ import annotations

from dataclasses import dataclass

from .objects import ObjectState, Replica
from .segment import SegmentSnapshot


@dataclass(frozen=True, slots=True)
class ReplicateConfig:
    """How a write is placed and protected (upstream's ReplicateConfig, plus local_first).

    Attributes:
        replica_num: replicas on distinct segments; ``None``: ``default_replica_num``.
        soft_pin: soft-pin the key once written (TTL ``soft_pin_ttl_s`` or the default).
        hard_pin: hard-pin the key (never evicted).
        soft_pin_ttl_s: TTL of the soft pin; ``None``: ``MasterConfig.soft_pin_ttl_s``.
        preferred_segments: segment names to place on first, best first.
        local_first: place on the writer's own segments first.
    """

    replica_num: int | None = None
    soft_pin: bool = False
    hard_pin: bool = False
    soft_pin_ttl_s: float | None = None
    preferred_segments: tuple[str, ...] = ()
    local_first: bool = False


@dataclass(frozen=True, slots=True)
class GetResult:
    """Where to read an object, and how long the granted lease lasts."""

    key: str
    size: int
    replicas: tuple[Replica, ...]
    lease_ttl_s: float
    version: int = 0
    """The replica set's version (``ObjectMeta.version``; through the fast channel's
    versioned lookup, with the master's ``RUN_ID`` above bit 64): two answers with the
    same non-zero version name the same bytes. 0: not known (gRPC)."""


ReadRow = tuple[int, tuple[Replica, ...], float, int]
"""A :class:`GetResult` without its key, as a plain tuple: ``(size, replicas,
lease_ttl_s, version)`` (``MasterState.read_rows``; a third of the cost of the
object)."""


@dataclass(frozen=True, slots=True)
class RemoveManyResult:
    """Outcome of a bulk removal."""

    removed: int
    """Objects removed."""
    skipped: int
    """Matching objects kept because they were leased or still being written."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One row of a key listing."""

    key: str
    size: int
    state: ObjectState


@dataclass(frozen=True, slots=True)
class ListKeysResult:
    """One page of keys in key order; pass ``next_start_after`` to get the next page."""

    entries: tuple[KeyEntry, ...]
    next_start_after: str | None


@dataclass(frozen=True, slots=True)
class MasterSnapshot:
    """The master's read-model: everything the CLI, dashboard and /metrics show."""

    key_count: int
    complete_count: int
    processing_count: int
    allocated_bytes: int
    total_capacity_bytes: int
    client_count: int
    segments: tuple[SegmentSnapshot, ...]
    key_pins: int
    prefix_pins: int
    evicted_objects_total: int
    evicted_bytes_total: int
    eviction_rounds_total: int
    removed_objects_total: int
    expired_puts_total: int
    lost_objects_total: int
    offloaded_evictions_total: int = 0
    """Evictions that freed DRAM but kept the object on SSD."""
    ssd_offloads_total: int = 0
    """SSD copies confirmed by nodes."""
    ssd_stages_total: int = 0
    """SSD-only objects staged back into DRAM."""
    ssd_stage_failures_total: int = 0
    """Stages that failed (miss, corrupt file, timeout)."""
    ssd_promotions_total: int = 0
    """Stage copies kept as ordinary replicas (staged ``promote_after`` times)."""
    ssd_only_count: int = 0
    """Objects with no DRAM replica, readable from SSD (gauge)."""
    ssd_lost_objects_total: int = 0
    """Objects removed because their last SSD copy went (miss, corrupt, disk eviction)."""
    grant_count: int = 0
    """Grants held by writers: space of their next puts, allocated ahead (gauge)."""
    granted_bytes: int = 0
    """Bytes those grants hold (part of ``allocated_bytes``, in no object)."""

    @property
    def usage(self) -> float:
        """Allocated fraction of the total capacity (0 when nothing is mounted)."""
        if not self.total_capacity_bytes:
            return 0.0
        return self.allocated_bytes / self.total_capacity_bytes
