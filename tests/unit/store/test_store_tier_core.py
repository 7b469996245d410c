"""SSD tier in the master core: offload selection, confirmations, eviction to SSD,
staging, promotion, disk drops, segment loss. Sans-IO: every ``now`` is explicit."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store import events as ev
from mooncake_core.store.errors import (
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    NotFoundError,
    StoreError,
    UnavailableError,
)
from mooncake_core.store.master import StagePending
from mooncake_core.store.objects import Slice
from mooncake_core.store.results import GetResult


def master(ssd: dict[str, int] | None = None, **cfg: Any) -> MasterState:
    """Segments a (client ca) and b (client cb), 1000 bytes each, SSD tiers as given."""
    base: dict[str, Any] = {"unmount_grace_s": 0, "offload_watermark": 0.5, "client_ttl_s": 1000}
    base.update(cfg)
    m = MasterState(MasterConfig(**base), rng=random.Random(0), alignment=1)
    ssd = {"a": 10_000} if ssd is None else ssd
    m.mount_segment("a", "ca", 1000, 0.0, ssd_capacity=ssd.get("a", 0))
    m.mount_segment("b", "cb", 1000, 0.0, ssd_capacity=ssd.get("b", 0))
    m.take_events()
    return m


def put(m: MasterState, key: str, size: int, now: float, seg: str = "a", **kw: Any) -> None:
    m.put_start(key, size, "w", now, ReplicateConfig(preferred_segments=(seg,), **kw))
    m.put_end(key, now)


def of(events: list[ev.Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def offload(m: MasterState, key: str, seg: str, client: str, now: float) -> None:
    """Ask for and confirm an SSD copy of ``key`` on ``seg``."""
    token = m.objects[key].token
    m.tier_offload_done(client, key, seg, token, True, now)


# ----------------------------------------------------------------- mounting
def test_mount_records_ssd_capacity_and_rejects_bad_values() -> None:
    m = master()
    seg = {s.name: s for s in m.snapshot().segments}
    assert (seg["a"].ssd_capacity, seg["b"].ssd_capacity) == (10_000, 0)
    m.mount_segment("a", "ca", 1000, 1.0, ssd_capacity=10_000)  # same: a no-op
    with pytest.raises(ConflictError):
        m.mount_segment("a", "ca", 1000, 1.0, ssd_capacity=5)
    with pytest.raises(InvalidArgumentError, match="ssd_capacity"):
        m.mount_segment("c", "cc", 1000, 1.0, ssd_capacity=-1)


# ----------------------------------------------------------------- offloads
def test_offloads_least_recently_used_first_at_the_watermark() -> None:
    m = master(offload_batch=2)
    put(m, "k1", 200, 1.0)
    put(m, "k2", 200, 2.0)
    m.tick(2.5)
    assert of(m.take_events(), ev.OffloadRequested) == []  # 400 < 0.5 * 1000
    put(m, "k3", 200, 3.0)
    m.get_replica_list("k1", 4.0)  # recency now k2, k3, k1
    m.take_events()
    m.tick(5.0)
    asked = of(m.take_events(), ev.OffloadRequested)
    assert [(e.key, e.segment, e.size) for e in asked] == [("k2", "a", 200), ("k3", "a", 200)]
    assert asked[0].replica == (Slice("a", 200, 200),)
    assert asked[0].token == m.objects["k2"].token > 0
    m.tick(5.1)
    assert [e.key for e in of(m.take_events(), ev.OffloadRequested)] == ["k1"]
    m.tick(5.2)
    assert of(m.take_events(), ev.OffloadRequested) == []  # all asked, none is due
    m.tick(10.0)  # offload_retry_s (5 s) after the first requests
    assert [e.key for e in of(m.take_events(), ev.OffloadRequested)] == ["k2", "k3"]


def test_no_offload_on_a_segment_without_ssd_tier() -> None:
    m = master()
    put(m, "k1", 600, 1.0, seg="b")
    m.tick(2.0)
    assert of(m.take_events(), ev.OffloadRequested) == []


def test_offload_done_adds_the_ssd_copy() -> None:
    m = master()
    put(m, "k1", 600, 1.0)
    m.tick(2.0)
    (req,) = of(m.take_events(), ev.OffloadRequested)
    m.tier_offload_done("ca", "k1", "a", req.token, True, 3.0)
    assert of(m.take_events(), ev.SsdCopyAdded) == [ev.SsdCopyAdded(3.0, "k1", "a", 1, 1)]
    assert m.stat("k1", 3.0).ssd_segments == ("a",)
    snap = m.snapshot()
    assert snap.ssd_offloads_total == 1
    assert [s.ssd_keys for s in snap.segments] == [1, 0]
    m.tier_offload_done("ca", "k1", "a", req.token, True, 3.5)  # repeated: no-op
    assert m.take_events() == []
    m.tick(20.0)
    assert of(m.take_events(), ev.OffloadRequested) == []  # it has its copy


def test_failed_offload_is_asked_again_after_the_retry_time() -> None:
    m = master()
    put(m, "k1", 600, 1.0)
    m.tick(2.0)
    (req,) = of(m.take_events(), ev.OffloadRequested)
    m.tier_offload_done("ca", "k1", "a", req.token, False, 3.0, "io")
    assert m.stat("k1", 3.0).ssd_segments == ()
    m.tick(7.9)
    assert of(m.take_events(), ev.OffloadRequested) == []
    m.tick(8.0)
    assert [e.key for e in of(m.take_events(), ev.OffloadRequested)] == ["k1"]


@pytest.mark.parametrize(
    ("client", "key", "seg", "token", "exc", "code", "text"),
    [
        ("cb", "k1", "a", None, ConflictError, ErrorCode.INVALID_STATE, "'cb'"),
        ("ca", "k1", "zz", None, NotFoundError, ErrorCode.SEGMENT_NOT_FOUND, "'zz'"),
        ("ca", "nope", "a", None, NotFoundError, ErrorCode.OBJECT_NOT_FOUND, "'nope'"),
        ("ca", "k1", "a", 999, ConflictError, ErrorCode.STALE, "999"),
        ("ca", "k1", "a", 0, InvalidArgumentError, ErrorCode.INVALID_PARAMS, "token"),
        ("cb", "k1", "b", None, ConflictError, ErrorCode.INVALID_STATE, "without an SSD"),
        ("", "k1", "a", None, InvalidArgumentError, ErrorCode.INVALID_PARAMS, "client_id"),
        ("ca", "", "a", None, InvalidArgumentError, ErrorCode.INVALID_KEY, "key"),
    ],
)
def test_offload_done_validates_every_input(
    client: str,
    key: str,
    seg: str,
    token: int | None,
    exc: type[StoreError],
    code: ErrorCode,
    text: str,
) -> None:
    m = master()
    put(m, "k1", 600, 1.0)
    m.take_events()
    real = m.objects["k1"].token
    with pytest.raises(exc, match=text) as info:
        m.tier_offload_done(client, key, seg, real if token is None else token, True, 2.0)
    assert info.value.code == code
    assert m.stat("k1", 2.0).ssd_segments == ()
    assert m.take_events() == []


def test_offload_of_an_old_version_is_stale() -> None:
    m = master()
    put(m, "k1", 600, 1.0)
    old = m.objects["k1"].token
    m.upsert_start("k1", 300, "w", 2.0, ReplicateConfig(preferred_segments=("a",)))
    m.put_end("k1", 2.0)
    new = m.objects["k1"].token
    assert new != old
    with pytest.raises(ConflictError, match=f"version {new}.*version {old}") as info:
        m.tier_offload_done("ca", "k1", "a", old, True, 3.0)
    assert info.value.code == ErrorCode.STALE


def test_pinned_objects_are_written_through() -> None:
    m = master()
    put(m, "hot", 10, 1.0, hard_pin=True)  # far below the watermark
    asked = of(m.take_events(), ev.OffloadRequested)
    assert [(e.key, e.segment) for e in asked] == [("hot", "a")]
    put(m, "later", 10, 2.0)
    m.take_events()
    m.pin("later", 3.0, ttl_s=60.0)
    assert [e.key for e in of(m.take_events(), ev.OffloadRequested)] == ["later"]
    put(m, "plain", 10, 4.0, seg="b", soft_pin=True)  # b has no SSD tier
    assert of(m.take_events(), ev.OffloadRequested) == []


# ----------------------------------------------------------------- eviction
def test_eviction_prefers_offloaded_objects_and_keeps_them_on_ssd() -> None:
    m = master(eviction_ratio=0.01)
    put(m, "bfull", 1000, 0.5, seg="b", hard_pin=True)  # only a has room to win
    put(m, "k1", 300, 1.0)
    put(m, "k2", 300, 2.0)
    put(m, "k3", 300, 3.0)
    offload(m, "k3", "a", "ca", 4.0)  # the most recent one, but it has an SSD copy
    m.take_events()
    put(m, "k4", 300, 5.0)  # needs room on a: one victim
    events = m.take_events()
    assert of(events, ev.ReplicaDropped) == [ev.ReplicaDropped(5.0, "k3", "a", 0)]
    assert of(events, ev.ObjectRemoved) == []
    assert m.exist("k3", 5.0) and m.stat("k3", 5.0).replicas == ()
    assert [e.key for e in m.list_keys().entries] == ["bfull", "k1", "k2", "k3", "k4"]
    snap = m.snapshot()
    assert (snap.offloaded_evictions_total, snap.evicted_objects_total) == (1, 0)
    assert snap.ssd_only_count == 1
    put(m, "k5", 300, 6.0)  # next victim: k1, plain LRU, removed (no SSD copy)
    assert [(e.key, e.reason) for e in of(m.take_events(), ev.ObjectRemoved)] == [
        ("k1", ev.RemoveReason.EVICTED)
    ]


# ------------------------------------------------------------------ staging
def ssd_only(m: MasterState, key: str = "k1", size: int = 300) -> None:
    """``key`` on a, offloaded to a's SSD, then its DRAM evicted by a big write."""
    put(m, key, size, 1.0)
    offload(m, key, "a", "ca", 1.5)
    m.put_start("fill", 800, "w", 2.0, ReplicateConfig(replica_num=2))  # evicts key's DRAM
    assert m.stat(key, 2.0).replicas == ()
    m.put_revoke("fill", 2.0)
    m.take_events()


def test_reading_an_ssd_only_object_stages_it_once() -> None:
    m = master()
    ssd_only(m)
    first = m.read("k1", 3.0)
    assert isinstance(first, StagePending) and first.segment == "a"
    (req,) = of(m.take_events(), ev.StageRequested)
    assert (req.key, req.segment, req.size, req.request_id) == ("k1", "a", 300, first.request_id)
    assert req.replica == (Slice("a", 0, 300),)
    assert m.read("k1", 3.1) == first  # a second reader joins the same stage
    assert m.take_events() == []
    with pytest.raises(ConflictError, match="only on SSD") as info:
        m.get_replica_list("k1", 3.2)
    assert info.value.code == ErrorCode.OBJECT_NOT_READY
    m.tier_stage_done("ca", "k1", "a", req.request_id, True, 4.0)
    assert of(m.take_events(), ev.ReplicaAdded) == [ev.ReplicaAdded(4.0, "k1", req.replica, 1)]
    got = m.read("k1", 4.5)
    assert not isinstance(got, StagePending)
    assert got.replicas == (req.replica,) and got.lease_ttl_s == pytest.approx(10.0)
    assert m.snapshot().ssd_stages_total == 1 and m.snapshot().ssd_only_count == 0


def test_stage_copies_drop_after_the_lease_then_promotion_keeps_them() -> None:
    m = master(promote_after=2, lease_ttl_s=10.0)
    ssd_only(m)
    req = m.read("k1", 3.0)
    assert isinstance(req, StagePending)
    m.tier_stage_done("ca", "k1", "a", req.request_id, True, 4.0)
    m.take_events()
    m.tick(13.9)  # lease granted at stage done (4 + 10)
    assert of(m.take_events(), ev.ReplicaDropped) == []
    m.tick(14.0)
    assert of(m.take_events(), ev.ReplicaDropped) == [ev.ReplicaDropped(14.0, "k1", "a", 0)]
    assert m.stat("k1", 14.0).replicas == () and m.stat("k1", 14.0).ssd_segments == ("a",)
    again = m.read("k1", 15.0)
    assert isinstance(again, StagePending) and again.request_id != req.request_id
    m.tier_stage_done("ca", "k1", "a", again.request_id, True, 16.0)
    m.tick(100.0)
    assert len(m.stat("k1", 100.0).replicas) == 1  # second stage: promoted
    snap = m.snapshot()
    assert (snap.ssd_stages_total, snap.ssd_promotions_total) == (2, 1)


def two_ssd_copies(m: MasterState) -> None:
    """k1 with replicas on a and b, both offloaded, both DRAM replicas evicted."""
    m.put_start("k1", 300, "w", 1.0, ReplicateConfig(replica_num=2))
    m.put_end("k1", 1.0)
    offload(m, "k1", "a", "ca", 1.5)
    offload(m, "k1", "b", "cb", 1.5)
    m.put_start("fill", 800, "w", 2.0, ReplicateConfig(replica_num=2))
    assert m.stat("k1", 2.0).replicas == ()
    m.put_revoke("fill", 2.0)
    m.take_events()


def test_failed_stage_tries_the_next_copy_then_loses_the_object() -> None:
    m = master(ssd={"a": 10_000, "b": 10_000})
    two_ssd_copies(m)
    first = m.read("k1", 3.0)
    assert isinstance(first, StagePending) and first.segment == "a"
    m.take_events()
    m.tier_stage_done("ca", "k1", "a", first.request_id, False, 4.0, "corrupt")
    events = m.take_events()
    assert of(events, ev.SsdCopyDropped) == [ev.SsdCopyDropped(4.0, "k1", "a", 1, 0)]
    (nxt,) = of(events, ev.StageRequested)
    assert nxt.segment == "b"
    assert [s.used for s in m.snapshot().segments] == [0, 300]  # a's range freed
    m.tier_stage_done("cb", "k1", "b", nxt.request_id, False, 5.0, "miss")
    events = m.take_events()
    assert of(events, ev.ObjectRemoved) == [
        ev.ObjectRemoved(5.0, "k1", ev.RemoveReason.SSD_LOST, True)
    ]
    with pytest.raises(NotFoundError):
        m.read("k1", 6.0)
    snap = m.snapshot()
    assert (snap.ssd_stage_failures_total, snap.ssd_lost_objects_total) == (2, 1)
    assert snap.allocated_bytes == 0 and [s.ssd_keys for s in snap.segments] == [0, 0]


def test_an_unanswered_stage_keeps_the_copy_and_cools_down() -> None:
    m = master(stage_timeout_s=2.0)
    ssd_only(m)
    req = m.read("k1", 3.0)
    assert isinstance(req, StagePending)
    m.take_events()
    m.tick(4.9)
    assert m.take_stalled() == []
    m.tick(5.0)  # no answer: the node may have been away, the file may be fine
    assert m.take_stalled() == ["k1"]
    assert of(m.take_events(), ev.SsdCopyDropped) == []
    assert m.stat("k1", 5.0).ssd_segments == ("a",)
    snap = m.snapshot()
    assert (snap.ssd_stage_failures_total, snap.ssd_lost_objects_total) == (1, 0)
    # The staging range is held for the node, which may still be reading a slow disk
    # into it, until put_release_s after the stage started.
    (held,) = m.held_ranges()
    assert (held[3], snap.allocated_bytes) == (3.0 + m.config.put_release_s, held[2])
    with pytest.raises(UnavailableError, match="did not answer") as info:
        m.read("k1", 6.9)  # cooling down: not asked again yet
    assert info.value.code == ErrorCode.UNAVAILABLE
    with pytest.raises(ConflictError, match="pending: none") as stale:
        m.tier_stage_done("ca", "k1", "a", req.request_id, True, 6.9)  # too late
    assert stale.value.code == ErrorCode.STALE
    again = m.read("k1", 7.0)
    assert isinstance(again, StagePending) and again.request_id != req.request_id
    m.tier_stage_done("ca", "k1", "a", again.request_id, True, 7.5)
    assert len(m.stat("k1", 7.5).replicas) == 1


def test_an_unanswered_stage_moves_on_to_the_next_copy() -> None:
    m = master(ssd={"a": 10_000, "b": 10_000}, stage_timeout_s=2.0)
    two_ssd_copies(m)
    first = m.read("k1", 3.0)
    assert isinstance(first, StagePending) and first.segment == "a"
    m.take_events()
    m.tick(5.0)
    (nxt,) = of(m.take_events(), ev.StageRequested)
    assert nxt.segment == "b" and m.take_stalled() == []
    assert m.stat("k1", 5.0).ssd_segments == ("a", "b")


def test_stage_done_validates_its_request() -> None:
    m = master()
    ssd_only(m)
    req = m.read("k1", 3.0)
    assert isinstance(req, StagePending)
    with pytest.raises(ConflictError, match=f"request {req.request_id + 7}") as info:
        m.tier_stage_done("ca", "k1", "a", req.request_id + 7, True, 4.0)
    assert info.value.code == ErrorCode.STALE
    with pytest.raises(ConflictError, match="'cb'"):
        m.tier_stage_done("cb", "k1", "a", req.request_id, True, 4.0)
    with pytest.raises(NotFoundError, match="'nope'"):
        m.tier_stage_done("ca", "nope", "a", req.request_id, True, 4.0)
    with pytest.raises(InvalidArgumentError, match="request_id"):
        m.tier_stage_done("ca", "k1", "a", 0, True, 4.0)
    assert m.read("k1", 4.0) == req  # still pending, untouched


# ---------------------------------------------------------------- disk drops
def test_tier_dropped_forgets_copies_and_removes_what_is_left_with_nothing() -> None:
    m = master()
    ssd_only(m, "gone")
    put(m, "kept", 100, 3.0)
    offload(m, "kept", "a", "ca", 3.5)
    m.take_events()
    with pytest.raises(InvalidArgumentError):
        m.tier_dropped("ca", "a", ["kept", ""], 4.0)
    assert m.stat("kept", 4.0).ssd_segments == ("a",)  # nothing changed
    res = m.tier_dropped("ca", "a", ["gone", "kept", "unknown"], 4.0)
    assert (res.removed, res.skipped) == (1, 1)
    events = m.take_events()
    assert [(e.key, e.reason) for e in of(events, ev.ObjectRemoved)] == [
        ("gone", ev.RemoveReason.SSD_LOST)
    ]
    assert sorted(e.key for e in of(events, ev.SsdCopyDropped)) == ["gone", "kept"]
    assert m.stat("kept", 4.0).ssd_segments == () and len(m.stat("kept", 4.0).replicas) == 1
    with pytest.raises(ConflictError, match="'cb'"):
        m.tier_dropped("cb", "a", ["kept"], 5.0)


# -------------------------------------------------------------- segment loss
def test_client_expiry_removes_its_ssd_copies() -> None:
    m = master(ssd={"a": 10_000, "b": 10_000}, client_ttl_s=10.0)
    ssd_only(m, "only_a")  # SSD-only, its copy on a
    m.put_start("both", 100, "w", 3.0, ReplicateConfig(replica_num=2))
    m.put_end("both", 3.0)
    offload(m, "both", "a", "ca", 3.5)
    m.heartbeat("cb", 15.0)
    m.take_events()
    m.tick(15.0)  # ca silent since 0: a and its disk are gone
    events = m.take_events()
    assert [(e.key, e.reason) for e in of(events, ev.ObjectRemoved)] == [
        ("only_a", ev.RemoveReason.SEGMENT_LOST)
    ]
    info = m.stat("both", 15.0)
    assert info.ssd_segments == () and [r[0].segment for r in info.replicas] == ["b"]
    assert m.snapshot().ssd_only_count == 0


def test_losing_the_dram_segment_keeps_an_object_with_another_ssd_copy() -> None:
    m = master(ssd={"a": 10_000, "b": 10_000})
    m.put_start("k1", 100, "w", 1.0, ReplicateConfig(replica_num=2))
    m.put_end("k1", 1.0)
    offload(m, "k1", "b", "cb", 1.5)
    m.drop_replica("k1", "b", 2.0)  # DRAM only on a now, SSD copy on b
    m.take_events()
    m.unmount_segment("a", 3.0, client_id="ca")  # grace 0
    events = m.take_events()
    assert of(events, ev.ObjectRemoved) == []
    assert of(events, ev.ReplicaDropped) == [ev.ReplicaDropped(3.0, "k1", "a", 0)]
    assert m.stat("k1", 3.0).ssd_segments == ("b",)
    assert isinstance(m.read("k1", 4.0), StagePending)


def test_removing_an_ssd_only_object_clears_its_copies() -> None:
    m = master()
    ssd_only(m)
    m.read("k1", 3.0)  # a stage pending too: its range is held for the node filling it
    m.remove("k1", 3.5, force=True)
    snap = m.snapshot()
    assert snap.key_count == 0 and snap.ssd_only_count == 0
    assert [(h[2], h[3]) for h in m.held_ranges()] == [
        (snap.allocated_bytes, 3.0 + m.config.put_release_s)
    ]
    assert [s.ssd_keys for s in snap.segments] == [0, 0]


def test_offload_watermark_defaults_below_eviction_and_may_not_exceed_it() -> None:
    assert MasterConfig().effective_offload_watermark == pytest.approx(0.8)
    assert MasterConfig(eviction_high_watermark=0.5).effective_offload_watermark == 0.4
    with pytest.raises(ValueError, match="offload_watermark"):
        MasterConfig(offload_watermark=0.95)


def test_an_ssd_only_object_on_a_drained_segment_is_still_staged() -> None:
    m = master()
    ssd_only(m)
    m.drain_segment("a", 3.0)  # no DRAM replica there: DRAINED at once
    r = m.read("k1", 3.5)
    assert isinstance(r, StagePending) and r.segment == "a"
    m.tier_stage_done("ca", "k1", "a", r.request_id, True, 4.0)
    m.tick(20.0)  # the stage copy goes after its lease
    assert m.stat("k1", 20.0).replicas == ()
    assert [(s.state.name, s.used) for s in m.snapshot().segments] == [
        ("DRAINED", 0),
        ("MOUNTED", 0),
    ]


def test_read_rows_grants_exactly_what_read_grants_one_key_at_a_time() -> None:
    # The batch read's fast loop against read() key by key, on twin cores: the same
    # results, leases, recency order, stages and events, for every kind of key.
    def build() -> MasterState:
        m = master()
        ssd_only(m, "ssd", 300)
        put(m, "old", 100, 2.1)
        put(m, "new", 100, 2.2)
        m.put_start("writing", 50, "w", 2.3, ReplicateConfig(preferred_segments=("b",)))
        m.take_events()
        return m

    keys = ["new", "missing", "ssd", "writing", "old", "ssd", "a\x00bad"]
    one, many = build(), build()
    singly: list[Any] = []
    for k in keys:
        try:
            r = one.read(k, 5.0)
        except StoreError as exc:
            singly.append(exc)
            continue
        singly.append(r if isinstance(r, StagePending) else (r.size, r.replicas, r.lease_ttl_s))
    rows = many.read_rows(keys, 5.0)
    assert [type(r) for r in rows] == [type(r) for r in singly]
    for k, a, b in zip(keys, rows, singly, strict=True):
        if isinstance(a, StoreError):
            assert (a.code, a.message) == (b.code, b.message)
        elif isinstance(a, tuple):
            # Each core numbers its own versions: the row carries its object's.
            assert a[:3] == b and a[3] == many.objects[k].version
        else:
            assert a == b
    assert rows[0][:3] == (100, ((Slice("a", 100, 100),),), many.config.lease_ttl_s)
    assert isinstance(rows[2], StagePending) and rows[5] == rows[2]  # one stage, joined
    assert list(many.objects.keys()) == list(one.objects.keys())  # recency: old last
    assert list(many.objects.keys())[-1] == "old"
    for k in ("new", "old", "ssd", "writing"):
        a, b = many.objects[k], one.objects[k]
        assert (a.lease_expiry, a.last_access) == (b.lease_expiry, b.last_access)
    assert many.take_events() == one.take_events()
    # batch_read is the same rows as results.
    (a,), (b,) = many.batch_read(["old"], 6.0), one.batch_read(["old"], 6.0)
    assert isinstance(a, GetResult) and isinstance(b, GetResult)
    assert (a.key, a.size, a.replicas, a.lease_ttl_s) == (b.key, b.size, b.replicas, b.lease_ttl_s)
    assert (a.version, b.version) == (many.objects["old"].version, one.objects["old"].version)


def test_a_version_changes_with_every_change_of_the_replica_set_and_only_then() -> None:
    # A client's cached location is good while the master answers the version it was
    # read under: any replica change must give a new one, reads and PutEnd must not.
    m = master(ssd={"a": 10_000})
    m.put_start("k", 100, "w", 1.0, ReplicateConfig(preferred_segments=("a",)))
    seen = [m.objects["k"].version]
    m.put_end("k", 1.1)  # the same bytes, now readable
    assert m.objects["k"].version == seen[-1]
    r = m.read("k", 1.2)
    assert isinstance(r, GetResult) and r.version == seen[-1]
    assert m.read_rows(["k"], 1.3)[0][3] == seen[-1]  # type: ignore[index]

    def changed() -> None:
        v = m.objects["k"].version
        assert v not in seen, f"version {v} handed out again"
        seen.append(v)

    m.tick(20.0)  # leases over
    m.upsert_start("k", 100, "w", 20.0, ReplicateConfig(preferred_segments=("a",)))
    changed()  # a new object
    m.put_end("k", 20.1)
    offload(m, "k", "a", "ca", 20.2)
    assert m.objects["k"].version == seen[-1]  # an SSD copy is not a replica
    m.put_start("fill", 950, "w", 40.0, ReplicateConfig(preferred_segments=("a",)))
    assert m.stat("k", 40.0).replicas == ()  # evicted to SSD
    changed()
    m.put_revoke("fill", 40.0)
    st = m.read("k", 41.0)
    assert isinstance(st, StagePending)
    m.tier_stage_done("ca", "k", "a", st.request_id, True, 41.1)
    assert m.stat("k", 41.1).replicas != ()  # staged back: maybe the same offset
    changed()
