"""Replica moves in the master core: add a replica to a readable object, drop one,
undrain, list a segment's objects, and journal replay of all of it."""

from __future__ import annotations

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import (
    CapacityError,
    ConflictError,
    ErrorCode,
    MasterState,
    NotFoundError,
    ReplicaAdded,
    ReplicaDropped,
    ReplicateConfig,
    SegmentState,
    SegmentStateChanged,
    Slice,
)
from mooncake_core.store.ha.image import MetadataImage, records_from_events

ON_A = ReplicateConfig(preferred_segments=("a",))


def _master(make_master: MakeMaster, **cfg: object) -> MasterState:
    m = make_master([("a", "ca", 1000), ("b", "cb", 1000), ("c", "cc", 1000)], **cfg)
    m.put_start("k", 100, "w", 0.0, ON_A)
    m.put_end("k", 0.0)
    m.take_events()
    return m


def _state(m: MasterState, seg: str) -> SegmentState:
    return next(s.state for s in m.snapshot().segments if s.name == seg)


def _tick(m: MasterState, now: float) -> None:
    for c in ("ca", "cb", "cc"):
        m.heartbeat(c, now)
    m.tick(now)


def _used(m: MasterState, seg: str) -> int:
    return next(s.used for s in m.snapshot().segments if s.name == seg)


def test_added_replica_is_invisible_until_end(make_master: MakeMaster) -> None:
    m = _master(make_master, lease_ttl_s=5.0)
    m.drain_segment("a", 1.0)
    rep = m.add_replica_start("k", 1.0, exclude_segments=("b",))
    assert rep == (Slice("c", 0, 100),)
    assert _used(m, "c") == 100
    # Still readable, from the old replica only.
    assert m.get_replica_list("k", 1.5).replicas == ((Slice("a", 0, 100),),)
    with pytest.raises(ConflictError) as err:
        m.add_replica_start("k", 1.5)
    assert err.value.code == ErrorCode.INVALID_STATE
    m.take_events()
    assert m.add_replica_end("k", 2.0) == rep
    assert m.take_events() == [ReplicaAdded(2.0, "k", rep, 2)]
    assert m.get_replica_list("k", 2.0).replicas == ((Slice("a", 0, 100),), rep)


def test_add_replica_target_checks_leave_state_alone(make_master: MakeMaster) -> None:
    m = _master(make_master)
    m.drain_segment("b", 0.0)
    before = m.snapshot()
    with pytest.raises(ConflictError, match="'b' is DRAINED"):
        m.add_replica_start("k", 1.0, target_segment="b")
    with pytest.raises(ConflictError, match="already holds"):
        m.add_replica_start("k", 1.0, target_segment="a")
    with pytest.raises(NotFoundError):
        m.add_replica_start("k", 1.0, target_segment="zz")
    with pytest.raises(CapacityError) as err:
        m.add_replica_start("k", 1.0, exclude_segments=("c",))
    assert err.value.code == ErrorCode.NO_AVAILABLE_SEGMENT
    with pytest.raises(NotFoundError):
        m.add_replica_start("nope", 1.0)
    assert m.snapshot() == before
    assert m.add_replica_start("k", 1.0, target_segment="c") == (Slice("c", 0, 100),)


def test_add_replica_refuses_object_being_written(make_master: MakeMaster) -> None:
    m = _master(make_master)
    m.put_start("w", 10, "w", 0.0)
    with pytest.raises(ConflictError) as err:
        m.add_replica_start("w", 0.0)
    assert err.value.code == ErrorCode.OBJECT_NOT_READY


def test_add_replica_store_full(make_master: MakeMaster) -> None:
    m = make_master([("a", "ca", 100), ("b", "cb", 50)])
    m.put_start("k", 100, "w", 0.0)
    m.put_end("k", 0.0)
    with pytest.raises(CapacityError) as err:
        m.add_replica_start("k", 1.0)
    assert err.value.code == ErrorCode.STORE_FULL
    assert _used(m, "b") == 0


def test_revoke_and_timeout_release_space(make_master: MakeMaster) -> None:
    m = _master(make_master, put_timeout_s=10.0)
    m.add_replica_start("k", 1.0, target_segment="b")
    m.add_replica_revoke("k", 2.0)
    assert _used(m, "b") == 0
    with pytest.raises(NotFoundError):
        m.add_replica_end("k", 2.0)
    m.add_replica_start("k", 3.0, target_segment="b")
    assert m.discard_stale_adds(12.9) == []
    assert m.discard_stale_adds(13.0) == ["k"]
    assert m.stat("k", 13.0).replicas == ((Slice("a", 0, 100),),)
    # Timed out, not revoked by its copier: held until put_release_s after its start.
    assert m.held_ranges() == [("b", 0, 100, 3.0 + m.config.put_release_s)]
    _tick(m, 3.0 + m.config.put_release_s)
    assert _used(m, "b") == 0


def test_drop_unleased_frees_now_and_drains(make_master: MakeMaster) -> None:
    m = _master(make_master)
    m.drain_segment("a", 1.0)
    m.add_replica_start("k", 1.0, target_segment="b")
    m.add_replica_end("k", 1.0)
    m.take_events()
    assert m.drop_replica("k", "a", 2.0) is True
    assert m.take_events() == [
        ReplicaDropped(2.0, "k", "a", 1),
        SegmentStateChanged(2.0, "a", "DRAINED"),
    ]
    assert _used(m, "a") == 0
    assert m.stat("k", 2.0).replicas == ((Slice("b", 0, 100),),)


def test_drop_under_lease_waits_for_the_lease(make_master: MakeMaster) -> None:
    m = _master(make_master, lease_ttl_s=5.0)
    m.drain_segment("a", 1.0)
    m.get_replica_list("k", 1.0)  # a reader holds the "a" replica until 6.0
    m.add_replica_start("k", 1.0, target_segment="b")
    m.add_replica_end("k", 1.0)
    assert m.drop_replica("k", "a", 2.0) is False
    # New readers no longer see it; its space stays reserved for the old reader.
    assert m.get_replica_list("k", 3.0).replicas == ((Slice("b", 0, 100),),)
    assert _used(m, "a") == 100
    assert _state(m, "a") == SegmentState.DRAINING
    assert m.list_segment_objects("a").entries == ()
    assert m.finish_replica_drops(5.9) == 0
    m.tick(6.0)
    assert _used(m, "a") == 0
    assert _state(m, "a") == SegmentState.DRAINED


def test_drop_refusals_keep_state(make_master: MakeMaster) -> None:
    m = _master(make_master)
    before = m.snapshot()
    with pytest.raises(ConflictError, match="would leave no replica"):
        m.drop_replica("k", "a", 1.0)
    with pytest.raises(NotFoundError, match="no replica on 'b'"):
        m.drop_replica("k", "b", 1.0)
    assert m.snapshot() == before
    assert m.stat("k", 1.0).replicas == ((Slice("a", 0, 100),),)


def test_remove_releases_pending_moves(make_master: MakeMaster) -> None:
    m = _master(make_master)
    m.add_replica_start("k", 1.0, target_segment="b")
    m.remove("k", 1.0)
    # The copier may still be writing the new replica: its range is held for it.
    assert [_used(m, s) for s in "abc"] == [0, 100, 0]
    assert all(s.keys == 0 for s in m.snapshot().segments)
    _tick(m, 1.0 + m.config.put_release_s)
    assert [_used(m, s) for s in "abc"] == [0, 0, 0]


def test_unmount_target_cancels_pending_add(make_master: MakeMaster) -> None:
    m = _master(make_master, unmount_grace_s=0.0)
    m.add_replica_start("k", 1.0, target_segment="b")
    m.take_events()
    m.unmount_segment("b", 2.0)
    assert [type(e).__name__ for e in m.take_events()] == ["SegmentUnmounted"]
    with pytest.raises(NotFoundError):
        m.add_replica_end("k", 2.0)
    assert m.stat("k", 2.0).replicas == ((Slice("a", 0, 100),),)


def test_undrain_and_list_segment_objects(make_master: MakeMaster) -> None:
    m = _master(make_master)
    for key in ("k2", "k3"):
        m.put_start(key, 10, "w", 0.0, ON_A)
        m.put_end(key, 0.0)
    page = m.list_segment_objects("a", limit=2)
    assert [e.key for e in page.entries] == ["k", "k2"]
    assert page.next_start_after == "k2"
    assert [e.key for e in m.list_segment_objects("a", start_after="k2").entries] == ["k3"]
    assert m.list_segment_objects("b").entries == ()
    with pytest.raises(NotFoundError):
        m.list_segment_objects("zz")
    m.drain_segment("b", 1.0)
    m.tick(1.0)
    assert _state(m, "b") == SegmentState.DRAINED
    m.take_events()
    m.undrain_segment("b", 2.0)
    assert m.take_events() == [SegmentStateChanged(2.0, "b", "MOUNTED")]
    assert m.add_replica_start("k", 2.0, target_segment="b") == (Slice("b", 0, 100),)
    m.unmount_segment("c", 3.0)
    with pytest.raises(ConflictError, match="UNMOUNTING"):
        m.undrain_segment("c", 3.0)


def test_journal_replays_added_and_dropped_replicas(make_master: MakeMaster) -> None:
    m = make_master()
    img = MetadataImage()
    log: list[object] = []

    def sync() -> None:
        recs = records_from_events(m.take_events(), 0.0, lambda _: None)
        log.extend(recs)
        img.apply_all(recs)

    for name in "ab":
        m.mount_segment(name, "c" + name, 1000, 0.0)
    m.put_start("k", 100, "w", 0.0, ON_A)
    m.put_end("k", 0.0)
    m.drain_segment("a", 0.0)
    m.add_replica_start("k", 1.0)
    m.add_replica_end("k", 1.0)
    m.drop_replica("k", "a", 2.0)
    m.undrain_segment("a", 3.0)
    sync()
    assert {"t": "replica_added", "key": "k", "replica": [["b", 0, 100]]} in log
    assert img.objects["k"] == (100, ((Slice("b", 0, 100),),))
    assert img.segments["a"].state == "MOUNTED"


def test_restart_rebuilds_moves(make_master: MakeMaster) -> None:
    """A master rebuilt from the journal has the added replica, not the dropped one, and
    neither a pending addition nor a lease-deferred drop holds space any more.

    Sizes are multiples of 64: the rebuilt master allocates with its default alignment."""
    from mooncake_core.config.models import MasterConfig
    from mooncake_core.store.ha.rebuild import build_state

    m = make_master(lease_ttl_s=5.0)
    img = MetadataImage()
    for name in "abc":
        m.mount_segment(name, "c" + name, 1000, 0.0)
    for key in ("k", "j"):
        m.put_start(key, 128, "w", 0.0, ON_A)
        m.put_end(key, 0.0)
    m.drain_segment("a", 0.0)
    m.get_replica_list("k", 1.0)  # leased: the drop below waits for the lease
    m.add_replica_start("k", 1.0, target_segment="b")
    m.add_replica_end("k", 1.0)
    m.drop_replica("k", "a", 2.0)
    m.add_replica_start("j", 2.0, target_segment="c")  # never ended: lost at restart
    img.apply_all(records_from_events(m.take_events(), 0.0, lambda _: None))

    r = build_state(img, MasterConfig(lease_ttl_s=5.0), 0.0, 0.0)
    assert r.stat("k", 0.0).replicas == ((Slice("b", 0, 128),),)
    assert r.stat("j", 0.0).replicas == ((Slice("a", 128, 128),),)
    used = {s.name: s.used for s in r.snapshot().segments}
    assert used["a"] == 128 and used["b"] == 128 and used["c"] == 0
    with pytest.raises(NotFoundError):
        r.add_replica_end("j", 0.0)
    assert [e.key for e in r.list_segment_objects("a").entries] == ["j"]
