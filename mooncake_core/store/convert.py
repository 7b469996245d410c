"""Translation between the core's dataclasses and the ``store.proto`` messages.

Both the service and the client use these, so a value survives the round trip exactly.
Times: the core speaks master-monotonic instants; the wire speaks durations relative to
the reply (``lease_ttl_s``, ``remaining_s``); a client turns them back into its own
instants if it needs to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from mooncake_core.rpc import store_pb2 as pb

from . import events as ev
from .errors import ErrorCode, StoreError, error_from_code
from .ha.readiness import Readiness
from .objects import ObjectInfo, ObjectState, PinLevel, Replica, Slice
from .pins import Pin
from .results import GetResult, KeyEntry, ListKeysResult, MasterSnapshot, ReplicateConfig
from .segment import SegmentSnapshot, SegmentState

OK = pb.Error(code=pb.OK)

GRPC_OPTIONS = [
    # Large pages (ListKeys up to 100k keys) and batches exceed gRPC's 4 MiB default.
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
    # A restarted or failed-over master is found again within a second: gRPC's default
    # reconnect backoff grows to 120 s, longer than a node's client_ttl_s.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
"""Channel/server options shared by the master and MasterClient."""


def error_to_pb(exc: StoreError | None) -> pb.Error:
    """The wire form of an error (``OK`` for ``None``)."""
    if exc is None:
        return OK
    return pb.Error(code=exc.code.name, message=exc.message)


def raise_for(err: pb.Error) -> None:
    """Raise the :class:`StoreError` an ``Error`` message carries; return if it is OK."""
    if err.code != pb.OK:
        raise error_from_code(err.code, err.message)


def error_from_pb(err: pb.Error) -> StoreError | None:
    """The exception an ``Error`` carries, or ``None`` for OK."""
    return None if err.code == pb.OK else error_from_code(err.code, err.message)


def replicas_to_pb(replicas: Iterable[Replica]) -> list[pb.Replica]:
    """Core replicas -> messages."""
    return [
        pb.Replica(
            slices=[pb.Slice(segment=s.segment, offset=s.offset, length=s.length) for s in r]
        )
        for r in replicas
    ]


def replicas_from_pb(replicas: Iterable[pb.Replica]) -> tuple[Replica, ...]:
    """Messages -> core replicas."""
    return tuple(tuple(Slice(s.segment, s.offset, s.length) for s in r.slices) for r in replicas)


def config_to_pb(cfg: ReplicateConfig | None) -> pb.ReplicateConfig:
    """ReplicateConfig -> message (``replica_num`` 0 means the master's default)."""
    cfg = cfg or ReplicateConfig()
    msg = pb.ReplicateConfig(
        replica_num=cfg.replica_num or 0,
        soft_pin=cfg.soft_pin,
        hard_pin=cfg.hard_pin,
        preferred_segments=list(cfg.preferred_segments),
        local_first=cfg.local_first,
    )
    if cfg.soft_pin_ttl_s is not None:
        msg.soft_pin_ttl_s = cfg.soft_pin_ttl_s
    return msg


def config_from_pb(msg: pb.ReplicateConfig) -> ReplicateConfig:
    """Message -> ReplicateConfig."""
    return ReplicateConfig(
        replica_num=msg.replica_num or None,
        soft_pin=msg.soft_pin,
        hard_pin=msg.hard_pin,
        soft_pin_ttl_s=msg.soft_pin_ttl_s if msg.HasField("soft_pin_ttl_s") else None,
        preferred_segments=tuple(msg.preferred_segments),
        local_first=msg.local_first,
    )


def segment_to_pb(s: SegmentSnapshot) -> pb.SegmentInfo:
    """SegmentSnapshot -> message."""
    return pb.SegmentInfo(
        name=s.name,
        client_id=s.client_id,
        state=s.state.name,
        capacity=s.capacity,
        used=s.used,
        keys=s.keys,
        transport_address=s.transport_address,
        location=s.location,
        free_blocks=s.free_blocks,
        largest_free=s.largest_free,
        ssd_capacity=s.ssd_capacity,
        ssd_keys=s.ssd_keys,
        suspect=s.suspect,
    )


def segment_from_pb(m: pb.SegmentInfo) -> SegmentSnapshot:
    """Message -> SegmentSnapshot."""
    return SegmentSnapshot(
        name=m.name,
        client_id=m.client_id,
        state=SegmentState(m.state),
        capacity=m.capacity,
        used=m.used,
        keys=m.keys,
        transport_address=m.transport_address,
        location=m.location,
        free_blocks=m.free_blocks,
        largest_free=m.largest_free,
        ssd_capacity=m.ssd_capacity,
        ssd_keys=m.ssd_keys,
        suspect=m.suspect,
    )


_SNAP_FIELDS = (
    "key_count",
    "complete_count",
    "processing_count",
    "allocated_bytes",
    "total_capacity_bytes",
    "client_count",
    "key_pins",
    "prefix_pins",
    "evicted_objects_total",
    "evicted_bytes_total",
    "eviction_rounds_total",
    "removed_objects_total",
    "expired_puts_total",
    "lost_objects_total",
    "offloaded_evictions_total",
    "ssd_offloads_total",
    "ssd_stages_total",
    "ssd_stage_failures_total",
    "ssd_promotions_total",
    "ssd_only_count",
    "ssd_lost_objects_total",
    "grant_count",
    "granted_bytes",
)


def snapshot_to_pb(s: MasterSnapshot) -> pb.Snapshot:
    """MasterSnapshot -> message."""
    msg = pb.Snapshot(**{f: getattr(s, f) for f in _SNAP_FIELDS})
    msg.segments.extend(segment_to_pb(g) for g in s.segments)
    return msg


def snapshot_from_pb(m: pb.Snapshot) -> MasterSnapshot:
    """Message -> MasterSnapshot."""
    fields = {f: getattr(m, f) for f in _SNAP_FIELDS}
    return MasterSnapshot(segments=tuple(segment_from_pb(g) for g in m.segments), **fields)


def get_result_to_pb(r: GetResult) -> pb.GetReplicaListResponse:
    """GetResult -> message."""
    return pb.GetReplicaListResponse(
        error=OK, size=r.size, replicas=replicas_to_pb(r.replicas), lease_ttl_s=r.lease_ttl_s
    )


def get_result_from_pb(key: str, m: pb.GetReplicaListResponse) -> GetResult:
    """Message -> GetResult (raises the carried error)."""
    raise_for(m.error)
    return GetResult(key, m.size, replicas_from_pb(m.replicas), m.lease_ttl_s)


def stat_to_pb(i: ObjectInfo) -> pb.StatResponse:
    """ObjectInfo -> message."""
    msg = pb.StatResponse(
        error=OK,
        key=i.key,
        size=i.size,
        state=i.state.name,
        replicas=replicas_to_pb(i.replicas),
        lease_remaining_s=i.lease_remaining_s,
        idle_s=i.idle_s,
        pin="PIN_" + i.pin.name,
        ssd_segments=list(i.ssd_segments),
    )
    if i.pin_remaining_s is not None:
        msg.pin_remaining_s = i.pin_remaining_s
    return msg


def stat_from_pb(m: pb.StatResponse) -> ObjectInfo:
    """Message -> ObjectInfo (raises the carried error)."""
    raise_for(m.error)
    return ObjectInfo(
        key=m.key,
        size=m.size,
        state=ObjectState(m.state),
        replicas=replicas_from_pb(m.replicas),
        lease_remaining_s=m.lease_remaining_s,
        idle_s=m.idle_s,
        pin=PinLevel(m.pin),
        pin_remaining_s=m.pin_remaining_s if m.HasField("pin_remaining_s") else None,
        ssd_segments=tuple(m.ssd_segments),
    )


def list_to_pb(r: ListKeysResult) -> pb.ListKeysResponse:
    """ListKeysResult -> message."""
    msg = pb.ListKeysResponse(
        error=OK,
        entries=[pb.KeyEntry(key=e.key, size=e.size, state=e.state.name) for e in r.entries],
    )
    if r.next_start_after is not None:
        msg.next_start_after = r.next_start_after
    return msg


def list_from_pb(m: pb.ListKeysResponse) -> ListKeysResult:
    """Message -> ListKeysResult (raises the carried error)."""
    raise_for(m.error)
    return ListKeysResult(
        tuple(KeyEntry(e.key, e.size, ObjectState(e.state)) for e in m.entries),
        m.next_start_after if m.HasField("next_start_after") else None,
    )


def pin_to_pb(p: Pin, now: float) -> pb.PinInfo:
    """Pin -> message, with the time left relative to ``now``."""
    msg = pb.PinInfo(target=p.target, prefix=p.is_prefix, hard=p.hard)
    if p.expires_at is not None:
        msg.remaining_s = p.expires_at - now
    return msg


def pin_from_pb(m: pb.PinInfo, now: float) -> Pin:
    """Message -> Pin, with ``expires_at`` on the caller's clock ``now``."""
    return Pin(
        m.target, m.prefix, m.hard, now + m.remaining_s if m.HasField("remaining_s") else None
    )


def event_to_pb(e: ev.Event, seq: int, unix_time: float) -> pb.Event:
    """Core event -> message; master-clock instants become durations from ``e.at``."""
    msg = pb.Event(seq=seq, unix_time=unix_time)
    if isinstance(e, ev.ObjectStored):
        msg.stored.CopyFrom(
            pb.ObjectStoredEvent(key=e.key, size=e.size, replicas=replicas_to_pb(e.replicas))
        )
    elif isinstance(e, ev.ObjectRemoved):
        msg.removed.CopyFrom(
            pb.ObjectRemovedEvent(key=e.key, reason=e.reason.value, was_complete=e.was_complete)
        )
    elif isinstance(e, ev.ReplicaDropped):
        msg.replica_dropped.CopyFrom(
            pb.ReplicaDroppedEvent(key=e.key, segment=e.segment, replicas_left=e.replicas_left)
        )
    elif isinstance(e, ev.ReplicaAdded):
        msg.replica_added.CopyFrom(
            pb.ReplicaAddedEvent(
                key=e.key, replica=replicas_to_pb((e.replica,))[0], replicas=e.replicas
            )
        )
    elif isinstance(e, ev.ObjectPinned):
        pin = pb.PinEvent(target=e.target, prefix=e.is_prefix, hard=e.hard)
        if e.expires_at is not None:
            pin.ttl_s = e.expires_at - e.at
        msg.pinned.CopyFrom(pin)
    elif isinstance(e, ev.ObjectUnpinned):
        msg.unpinned.CopyFrom(pb.UnpinEvent(target=e.target, prefix=e.is_prefix, expired=e.expired))
    elif isinstance(e, ev.SegmentMounted):
        msg.segment_mounted.CopyFrom(
            pb.SegmentMountedEvent(name=e.name, client_id=e.client_id, capacity=e.capacity)
        )
    elif isinstance(e, ev.SegmentStateChanged):
        msg.segment_state.CopyFrom(pb.SegmentStateEvent(name=e.name, state=e.state))
    elif isinstance(e, ev.SegmentUnmounted):
        msg.segment_unmounted.CopyFrom(pb.SegmentUnmountedEvent(name=e.name, reason=e.reason.value))
    elif isinstance(e, ev.ClientExpired):
        msg.client_expired.CopyFrom(pb.ClientExpiredEvent(client_id=e.client_id))
    elif isinstance(e, ev.OffloadRequested):
        msg.offload_requested.CopyFrom(
            pb.OffloadRequestedEvent(
                key=e.key,
                segment=e.segment,
                replica=replicas_to_pb((e.replica,))[0],
                size=e.size,
                token=e.token,
            )
        )
    elif isinstance(e, ev.StageRequested):
        msg.stage_requested.CopyFrom(
            pb.StageRequestedEvent(
                key=e.key,
                segment=e.segment,
                replica=replicas_to_pb((e.replica,))[0],
                size=e.size,
                request_id=e.request_id,
            )
        )
    elif isinstance(e, ev.SsdCopyAdded):
        msg.ssd_added.CopyFrom(_ssd_copy_to_pb(e))
    elif isinstance(e, ev.SsdCopyDropped):
        msg.ssd_dropped.CopyFrom(_ssd_copy_to_pb(e))
    else:  # pragma: no cover - every Event member is handled above
        raise TypeError(f"unknown event type {type(e).__name__}")
    return msg


def event_from_pb(m: pb.Event) -> ev.Event:
    """Message -> core event, with ``at`` = the master's publish wall time."""
    at = m.unix_time
    kind = m.WhichOneof("kind")
    if kind == "stored":
        s = m.stored
        return ev.ObjectStored(at, s.key, s.size, replicas_from_pb(s.replicas))
    if kind == "removed":
        r = m.removed
        return ev.ObjectRemoved(at, r.key, ev.RemoveReason(r.reason), r.was_complete)
    if kind == "replica_dropped":
        d = m.replica_dropped
        return ev.ReplicaDropped(at, d.key, d.segment, d.replicas_left)
    if kind == "replica_added":
        a = m.replica_added
        return ev.ReplicaAdded(at, a.key, replicas_from_pb([a.replica])[0], a.replicas)
    if kind == "pinned":
        p = m.pinned
        return ev.ObjectPinned(
            at, p.target, p.prefix, p.hard, at + p.ttl_s if p.HasField("ttl_s") else None
        )
    if kind == "unpinned":
        u = m.unpinned
        return ev.ObjectUnpinned(at, u.target, u.prefix, u.expired)
    if kind == "segment_mounted":
        g = m.segment_mounted
        return ev.SegmentMounted(at, g.name, g.client_id, g.capacity)
    if kind == "segment_state":
        st = m.segment_state
        return ev.SegmentStateChanged(at, st.name, SegmentState(st.state).name)
    if kind == "segment_unmounted":
        su = m.segment_unmounted
        return ev.SegmentUnmounted(at, su.name, ev.UnmountReason(su.reason))
    if kind == "client_expired":
        return ev.ClientExpired(at, m.client_expired.client_id)
    if kind == "offload_requested":
        o = m.offload_requested
        return ev.OffloadRequested(
            at, o.key, o.segment, replicas_from_pb([o.replica])[0], o.size, o.token
        )
    if kind == "stage_requested":
        q = m.stage_requested
        return ev.StageRequested(
            at, q.key, q.segment, replicas_from_pb([q.replica])[0], q.size, q.request_id
        )
    if kind == "ssd_added":
        c = m.ssd_added
        return ev.SsdCopyAdded(at, c.key, c.segment, c.ssd_copies, c.replicas)
    if kind == "ssd_dropped":
        c = m.ssd_dropped
        return ev.SsdCopyDropped(at, c.key, c.segment, c.ssd_copies, c.replicas)
    raise ValueError(f"event {m.seq} has no known kind ({kind!r})")


def _ssd_copy_to_pb(e: ev.SsdCopyAdded | ev.SsdCopyDropped) -> pb.SsdCopyEvent:
    return pb.SsdCopyEvent(
        key=e.key, segment=e.segment, ssd_copies=e.ssd_copies, replicas=e.replicas
    )


def batch_errors_to_pb(results: Sequence[object]) -> list[pb.Error]:
    """Per-item results (``StoreError`` or anything else = OK) -> Error messages."""
    return [error_to_pb(r) if isinstance(r, StoreError) else OK for r in results]


__all__ = ["OK", "ErrorCode"]


def readiness_to_pb(r: Readiness) -> pb.Readiness:
    """The ``Readiness`` message (its fields are the dataclass's, one to one)."""
    return pb.Readiness(**dataclasses.asdict(r))


def readiness_from_pb(m: pb.Readiness) -> Readiness:
    """The dataclass from a ``Readiness`` message."""
    return Readiness(**{f.name: getattr(m, f.name) for f in dataclasses.fields(Readiness)})
