"""Writes in the master's core: PutStart, Upsert, PutEnd, revoke, stale writes. Sans-IO.

A write allocates its replicas (evicting if needed) and installs the object as
PROCESSING, invisible to readers; PutEnd makes it COMPLETE, gives it a fresh version
token and, for a pinned object on a segment with an SSD tier, asks for a write-through
copy. Functions take the :class:`MasterState` they work on; its public methods delegate
here and document the behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import events as ev
from . import master_eviction as evict_ops
from . import master_removal as removal_ops
from . import master_tier_ops as tier_ops
from .errors import ConflictError, ErrorCode
from .objects import ObjectMeta, ObjectState, PinLevel, Replica
from .results import ReplicateConfig
from .validation import pin_expiry, validate_put

if TYPE_CHECKING:
    from .master_state import MasterState


def put_start(
    ms: MasterState,
    key: str,
    size: int,
    client_id: str,
    now: float,
    config: ReplicateConfig | None = None,
) -> tuple[Replica, ...]:
    """Body of :meth:`MasterState.put_start`."""
    cfg = config or ReplicateConfig()
    segs = ms.segments.allocatable()
    replica_num = validate_put(ms.config, key, size, client_id, cfg, len(segs))
    existing = ms.objects.get(key)
    if existing is not None:
        raise ConflictError(
            ErrorCode.OBJECT_ALREADY_EXISTS,
            f"object {key!r} already exists ({existing.state.name})",
        )
    replicas = evict_ops.allocate(ms, segs, key, size, replica_num, client_id, cfg, now, ())
    install(ms, key, size, replicas, client_id, cfg, now)
    return replicas


def upsert_start(
    ms: MasterState,
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
        return ms.put_start(key, size, client_id, now, cfg)
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


def put_end(ms: MasterState, key: str, now: float) -> None:
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


def put_revoke(ms: MasterState, key: str, now: float) -> None:
    """Body of :meth:`MasterState.put_revoke`."""
    obj = ms.objects.require(key)
    if obj.complete:
        raise ConflictError(
            ErrorCode.INVALID_STATE, f"object {key!r} is complete; use remove, not revoke"
        )
    removal_ops.drop(ms, key, obj, ev.RemoveReason.REVOKED, now)


def discard_stale_puts(ms: MasterState, now: float) -> list[str]:
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
    ms: MasterState,
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
