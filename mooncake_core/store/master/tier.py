"""The SSD tier rules of the master's core (docs/store.md, "SSD tier (master)"). Sans-IO.

What to offload and when, stages of SSD-only objects into DRAM, stage copies, and what a
node's reports (TierOffloadDone, TierStageDone, TierDropped) change. Functions take the
:class:`~.core.MasterCore` they work on; the operations in :mod:`.tier_api` call them
and document the behaviour. What is in flight is kept in :mod:`.tier_book`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

from .. import events as ev
from ..errors import (
    CapacityError,
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    StoreError,
    UnavailableError,
)
from ..objects import ObjectMeta, Replica
from ..results import RemoveManyResult, ReplicateConfig
from ..segment import Segment, SegmentState
from ..validation import check_key, check_name
from . import eviction as evict_ops
from . import removal as removal_ops
from . import space
from .core import MasterCore
from .tier_book import PendingStage


def wholly_on(replica: Replica, segment: str) -> bool:
    """Whether every slice of ``replica`` lies in ``segment``."""
    return all(sl.segment == segment for sl in replica)


def offload_done(
    ms: MasterCore,
    client_id: str,
    key: str,
    segment: str,
    token: int,
    ok: bool,
    now: float,
    reason: str = "",
) -> None:
    """Body of :meth:`MasterState.tier_offload_done`."""
    seg = owned_segment(ms, segment, client_id)
    if seg.ssd_capacity <= 0:
        raise ConflictError(
            ErrorCode.INVALID_STATE, f"segment {segment!r} was mounted without an SSD tier"
        )
    obj = tier_object(ms, key, token, "token")
    if obj.token != token or not obj.complete:
        raise ConflictError(
            ErrorCode.STALE,
            f"object {key!r} is now version {obj.token}, the offload to {segment!r} "
            f"copied version {token}; delete the file",
        )
    if segment not in obj.ssd and not any(wholly_on(r, segment) for r in obj.replicas):
        raise ConflictError(
            ErrorCode.STALE,
            f"object {key!r} (version {token}) has no replica on {segment!r} any more; "
            "delete the file",
        )
    if not ok:
        ms.tier.note_offload(key, segment, now)  # asked again after the retry time
        ms.tier.changes += 1
        return
    ms.tier.clear_offload(key, segment)
    if segment in obj.ssd:
        return
    obj.ssd = (*obj.ssd, segment)
    seg.ssd_keys.add(key)
    ms.counters.ssd_offloads += 1
    ms.events.append(ev.SsdCopyAdded(now, key, segment, len(obj.ssd), len(obj.replicas)))


def stage_done(
    ms: MasterCore,
    client_id: str,
    key: str,
    segment: str,
    request_id: int,
    ok: bool,
    now: float,
    reason: str = "",
) -> None:
    """Body of :meth:`MasterState.tier_stage_done`."""
    owned_segment(ms, segment, client_id)
    obj = tier_object(ms, key, request_id, "request_id")
    st = ms.tier.stages.get(key)
    if st is None or st.request_id != request_id or st.segment != segment:
        now_pending = "none" if st is None else f"request {st.request_id} on {st.segment!r}"
        raise ConflictError(
            ErrorCode.STALE,
            f"no stage of {key!r} on {segment!r} with request {request_id} is pending "
            f"(pending: {now_pending})",
        )
    del ms.tier.stages[key]
    ms.tier.settle(key, segment)
    if not ok:
        stage_failed(ms, key, obj, st, now)
        return
    obj.replicas = (*obj.replicas, st.replica)
    obj.stages += 1
    # The readers that asked are about to read: protect the copy for them.
    obj.lease_expiry = max(obj.lease_expiry, now + ms.config.lease_ttl_s)
    ms.counters.ssd_stages += 1
    ms.ssd_only.discard(key)
    if obj.stages >= ms.config.promote_after:
        ms.counters.ssd_promotions += 1
    else:
        ms.tier.stage_copies[key] = st.replica
    ms.tier.changes += 1
    ms.events.append(ev.ReplicaAdded(now, key, st.replica, len(obj.replicas)))


def dropped(
    ms: MasterCore, client_id: str, segment: str, keys: Sequence[str], now: float
) -> RemoveManyResult:
    """Body of :meth:`MasterState.tier_dropped`."""
    owned_segment(ms, segment, client_id)
    for key in keys:
        check_key(key, ms.config.max_key_length)
    removed = skipped = 0
    for key in keys:
        obj = ms.objects.get(key)
        if obj is None or segment not in obj.ssd:
            skipped += 1
            continue
        st = ms.tier.stages.get(key)
        if st is not None and st.segment == segment:
            del ms.tier.stages[key]
            gone = stage_failed(ms, key, obj, st, now)
        else:
            drop_ssd(ms, key, obj, segment, now)
            gone = after_ssd_loss(ms, key, obj, now)
        removed += gone
    return RemoveManyResult(removed, skipped)


def expire_stages(ms: MasterCore, now: float) -> list[str]:
    """Body of :meth:`MasterState.expire_stages`."""
    limit = ms.config.stage_timeout_s
    late = [k for k, st in ms.tier.stages.items() if now - st.started >= limit]
    for key in late:
        st = ms.tier.stages.pop(key)
        obj = ms.objects[key]
        # The node may still be reading a slow SSD into it: held for that writer.
        space.free_replica(ms, key, st.replica, now, space.writer_hold(ms, st.started, now))
        ms.counters.ssd_stage_failures += 1
        ms.tier.timed_out.setdefault(key, {})[st.segment] = now
        try:
            start_stage(ms, key, obj, now)
        except StoreError:
            ms.tier.stalled.append(key)
    return late


def drop_stage_copies(ms: MasterCore, now: float) -> int:
    """Body of :meth:`MasterState.drop_stage_copies`."""
    dropped = 0
    for key in list(ms.tier.stage_copies):
        obj = ms.objects[key]
        if obj.leased(now):
            continue
        replica = ms.tier.stage_copies.pop(key)
        if replica not in obj.replicas:
            continue
        if not obj.ssd:
            continue  # the SSD copies went meanwhile: this is the only copy now
        obj.replicas = tuple(r for r in obj.replicas if r != replica)
        space.free_replica(ms, key, replica, now)
        if not obj.replicas:
            ms.ssd_only.add(key)
        ms.events.append(ev.ReplicaDropped(now, key, replica[0].segment, len(obj.replicas)))
        dropped += 1
    return dropped


def request_offloads(ms: MasterCore, now: float) -> int:
    """Body of :meth:`MasterState.request_offloads`."""
    wm = ms.config.effective_offload_watermark
    retry = ms.config.offload_retry_s
    quota: dict[str, int] = {}
    for seg in ms.segments:
        if seg.ssd_capacity <= 0 or seg.state != SegmentState.MOUNTED:
            continue
        if seg.used < wm * seg.capacity or not seg.keys:
            continue
        idle = ms.tier.offload_idle.get(seg.name)
        if idle is not None and idle[0] == ms.tier.changes and now < idle[1]:
            continue  # nothing new since a scan found no candidate due
        quota[seg.name] = ms.config.offload_batch
    if not quota:
        return 0
    asked = 0
    left = dict(quota)
    next_due = dict.fromkeys(quota, math.inf)  # earliest retry of a skipped candidate
    for key, obj in ms.objects.items():
        if not obj.complete:
            continue
        for r in obj.replicas:
            name = r[0].segment
            if name not in left or name in obj.ssd or not wholly_on(r, name):
                continue
            if not ms.tier.offload_due(key, name, now, retry):
                at = ms.tier.offloads[key][name] + retry
                next_due[name] = min(next_due[name], at)
                continue
            request_offload(ms, key, obj, name, r, now)
            next_due[name] = min(next_due[name], now + retry)
            asked += 1
            left[name] -= 1
            if not left[name]:
                del left[name]
        if not left:
            break
    for name in left:
        ms.tier.offload_idle[name] = (ms.tier.changes, next_due[name])
    return asked


def owned_segment(ms: MasterCore, name: str, client_id: str) -> Segment:
    """The segment ``name``; ConflictError unless ``client_id`` owns it."""
    check_name("client_id", client_id)
    seg = ms.segments.get(name)
    if seg.client_id != client_id:
        raise ConflictError(
            ErrorCode.INVALID_STATE,
            f"segment {name!r} belongs to client {seg.client_id!r}, not {client_id!r}",
        )
    return seg


def tier_object(ms: MasterCore, key: str, ident: int, what: str) -> ObjectMeta:
    """The object of a node's tier report, after checking the key and the id."""
    check_key(key, ms.config.max_key_length)
    if not isinstance(ident, int) or ident <= 0:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"{what} must be a positive integer, got {ident!r}"
        )
    return ms.objects.require(key)


def on_ssd_segment(ms: MasterCore, obj: ObjectMeta) -> bool:
    """Whether a replica of the object starts on a segment with an SSD tier."""
    if not ms.segments.any_ssd:
        return False
    for r in obj.replicas:
        seg = ms.segments.find(r[0].segment)
        if seg is not None and seg.ssd_capacity > 0:
            return True
    return False


def write_through(ms: MasterCore, key: str, obj: ObjectMeta, now: float) -> None:
    """Pinned objects are copied to SSD at once (one copy is enough)."""
    if obj.ssd:
        return
    retry = ms.config.offload_retry_s
    for r in obj.replicas:
        name = r[0].segment
        seg = ms.segments.find(name)
        if seg is None or seg.ssd_capacity <= 0 or seg.state != SegmentState.MOUNTED:
            continue
        if not wholly_on(r, name) or not ms.tier.offload_due(key, name, now, retry):
            continue
        request_offload(ms, key, obj, name, r, now)
        return


def request_offload(
    ms: MasterCore, key: str, obj: ObjectMeta, segment: str, replica: Replica, now: float
) -> None:
    """Ask the node of ``segment`` to copy ``replica`` to SSD (``OffloadRequested``)."""
    ms.tier.note_offload(key, segment, now)
    ms.events.append(ev.OffloadRequested(now, key, segment, replica, obj.size, obj.token))


def start_stage(ms: MasterCore, key: str, obj: ObjectMeta, now: float) -> PendingStage:
    """Allocate a DRAM range on one of the object's SSD segments and ask its node
    to fill it. Tries the SSD segments in order; raises the last failure."""
    # MOUNTED segments first; a DRAINING or DRAINED one still serves reads (its stage
    # copy is short-lived); an UNMOUNTING one is about to lose its disk.
    ranked = sorted(
        (s.state != SegmentState.MOUNTED, i, s.name)
        for i, n in enumerate(obj.ssd)
        if (s := ms.segments.find(n)) is not None and s.state != SegmentState.UNMOUNTING
    )
    cooldown = ms.config.stage_timeout_s
    names = [n for _, _, n in ranked if not ms.tier.cooling(key, n, now, cooldown)]
    if ranked and not names:
        raise UnavailableError(
            ErrorCode.UNAVAILABLE,
            f"object {key!r} is only on SSD and the node(s) of {sorted(obj.ssd)} did not "
            f"answer a stage within {cooldown} s; retry later",
        )
    if not names:
        raise CapacityError(
            ErrorCode.NO_AVAILABLE_SEGMENT,
            f"object {key!r} is only on SSD ({', '.join(obj.ssd)}) and none of those "
            "segments is still mounted (all UNMOUNTING); cannot stage it",
        )
    cfg = ReplicateConfig(replica_num=1)
    failure: StoreError = CapacityError(ErrorCode.STORE_FULL, f"no room to stage {key!r}")
    for name in names:
        seg = ms.segments.get(name)
        try:
            placed = evict_ops.allocate(
                ms, [seg], key, obj.size, 1, obj.client_id, cfg, now, (key,)
            )
        except CapacityError as exc:
            failure = exc
            continue
        replica = placed[0]
        for sl in replica:
            ms.segments.get(sl.segment).keys.add(key)
        st = PendingStage(ms.tier.new_request(), name, replica, now)
        ms.tier.stages[key] = st
        ms.events.append(ev.StageRequested(now, key, name, replica, obj.size, st.request_id))
        return st
    raise failure


def stage_failed(ms: MasterCore, key: str, obj: ObjectMeta, st: PendingStage, now: float) -> bool:
    """A stage (already out of the pending table) failed: free its range, forget
    the SSD copy it read, stage the next one. Returns True if the object is gone."""
    space.free_replica(ms, key, st.replica, now)
    ms.counters.ssd_stage_failures += 1
    if st.segment in obj.ssd:
        drop_ssd(ms, key, obj, st.segment, now)
    if obj.ssd and not obj.replicas:
        # When this fails the next read tries again and reports why.
        with contextlib.suppress(StoreError):
            start_stage(ms, key, obj, now)
    return after_ssd_loss(ms, key, obj, now)


def drop_ssd(ms: MasterCore, key: str, obj: ObjectMeta, segment: str, now: float) -> None:
    """Forget the SSD copy of ``key`` on ``segment`` (``SsdCopyDropped``)."""
    obj.ssd = tuple(s for s in obj.ssd if s != segment)
    seg = ms.segments.find(segment)
    if seg is not None:
        seg.ssd_keys.discard(key)
    ms.events.append(ev.SsdCopyDropped(now, key, segment, len(obj.ssd), len(obj.replicas)))


def after_ssd_loss(ms: MasterCore, key: str, obj: ObjectMeta, now: float) -> bool:
    """Remove an object that has neither a replica nor an SSD copy left."""
    if obj.replicas or obj.ssd or key in ms.tier.stages:
        return False
    removal_ops.drop(ms, key, obj, ev.RemoveReason.SSD_LOST, now)
    ms.counters.ssd_lost += 1
    return True
