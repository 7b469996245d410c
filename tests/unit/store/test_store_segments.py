"""Segments and clients: mount, heartbeat expiry, unmount grace, drain."""

from __future__ import annotations

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import (
    CapacityError,
    ClientExpired,
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    MasterState,
    NotFoundError,
    ObjectRemoved,
    RemoveReason,
    ReplicaDropped,
    ReplicateConfig,
    SegmentMounted,
    SegmentState,
    SegmentStateChanged,
    SegmentUnmounted,
    Slice,
    UnmountReason,
)


def two_nodes(make_master: MakeMaster, **cfg: float) -> MasterState:
    m = make_master([("a", "c1", 1000), ("b", "c2", 1000)], client_ttl_s=10.0, **cfg)
    m.put_start("both", 100, "c1", 0.0, ReplicateConfig(replica_num=2))
    m.put_end("both", 0.0)
    m.put_start("only_a", 100, "c1", 0.0, ReplicateConfig(preferred_segments=("a",)))
    m.put_end("only_a", 0.0)
    m.take_events()
    return m


def test_silent_client_loses_segments_and_sole_replicas(make_master: MakeMaster) -> None:
    m = two_nodes(make_master)
    assert m.heartbeat("c2", 5.0) is True
    assert m.expire_clients(9.999) == []
    assert m.expire_clients(10.0) == ["c1"]
    assert m.take_events() == [
        ReplicaDropped(10.0, "both", "a", 1),
        ObjectRemoved(10.0, "only_a", RemoveReason.SEGMENT_LOST, True),
        SegmentUnmounted(10.0, "a", UnmountReason.CLIENT_EXPIRED),
        ClientExpired(10.0, "c1"),
    ]
    got = m.get_replica_list("both", 10.0)
    assert [r[0].segment for r in got.replicas] == ["b"]
    assert not m.exist("only_a", 10.0)
    snap = m.snapshot()
    assert [s.name for s in snap.segments] == ["b"]
    assert (snap.allocated_bytes, snap.lost_objects_total, snap.client_count) == (100, 1, 1)
    assert m.heartbeat("c1", 11.0) is False  # unknown: it must mount again


def test_sliced_replica_on_a_lost_segment_frees_its_other_slices(
    make_master: MakeMaster,
) -> None:
    m = make_master(
        [("a", "c1", 5000), ("b", "c2", 5000)],
        allocation_strategy="free_ratio_first",
        max_slice_size=4096,
        unmount_grace_s=0.0,
    )
    (rep,) = m.put_start("big", 6000, "c1", 0.0)
    assert rep == (Slice("a", 0, 4096), Slice("b", 0, 1904))
    m.put_end("big", 0.0)
    m.unmount_segment("a", 1.0)
    assert not m.exist("big", 1.0)
    assert m.snapshot().segments[0].used == 0  # b's slice went back to the free list


def test_unmount_grace_keeps_reads_and_stops_placement(make_master: MakeMaster) -> None:
    m = two_nodes(make_master, unmount_grace_s=5.0)
    m.unmount_segment("a", 1.0)
    assert m.take_events() == [SegmentStateChanged(1.0, "a", "UNMOUNTING")]
    assert m.get_replica_list("only_a", 2.0).replicas[0][0].segment == "a"
    with pytest.raises(CapacityError) as ei:
        m.put_start("x", 10, "c1", 2.0, ReplicateConfig(replica_num=2))
    assert ei.value.code == ErrorCode.NO_AVAILABLE_SEGMENT
    assert m.put_start("y", 10, "c1", 2.0)[0][0].segment == "b"
    m.unmount_segment("a", 2.0)  # idempotent
    assert m.finish_unmounts(5.999) == []
    assert m.finish_unmounts(6.0) == ["a"]
    assert not m.exist("only_a", 6.0)


def test_unmount_by_another_client_or_unknown_segment(make_master: MakeMaster) -> None:
    m = two_nodes(make_master)
    with pytest.raises(ConflictError, match="belongs to client 'c1'"):
        m.unmount_segment("a", 1.0, client_id="c2")
    with pytest.raises(NotFoundError) as ei:
        m.unmount_segment("zz", 1.0)
    assert ei.value.code == ErrorCode.SEGMENT_NOT_FOUND
    assert m.snapshot().segments[0].state == SegmentState.MOUNTED


def test_mount_rules(make_master: MakeMaster) -> None:
    m = make_master()
    snap = m.mount_segment("a", "c1", 4096, 0.0, transport_address="127.0.0.1:17001")
    assert (snap.name, snap.capacity, snap.transport_address) == ("a", 4096, "127.0.0.1:17001")
    m.mount_segment("a", "c1", 4096, 1.0)  # same owner, same size: no-op
    with pytest.raises(ConflictError) as ei:
        m.mount_segment("a", "c2", 4096, 1.0)
    assert ei.value.code == ErrorCode.SEGMENT_ALREADY_EXISTS
    for name, client, cap in [("", "c1", 1), ("b", "", 1), ("b", "c1", 0), ("b", "c1", -1)]:
        with pytest.raises(InvalidArgumentError):
            m.mount_segment(name, client, cap, 1.0)
    assert m.take_events() == [SegmentMounted(0.0, "a", "c1", 4096)]
    assert len(m.snapshot().segments) == 1


def test_mount_refreshes_the_client(make_master: MakeMaster) -> None:
    m = make_master(client_ttl_s=10.0)
    m.mount_segment("a", "c1", 100, 0.0)
    m.mount_segment("a", "c1", 100, 8.0)
    assert m.expire_clients(10.0) == []
    assert m.expire_clients(18.0) == ["c1"]


def test_drain(make_master: MakeMaster) -> None:
    m = two_nodes(make_master)
    m.drain_segment("a", 1.0)
    assert m.put_start("n", 10, "c1", 1.0)[0][0].segment == "b"
    assert m.get_replica_list("only_a", 1.0).size == 100  # still readable
    m.remove("only_a", 20.0)
    m.remove("both", 20.0)
    m.heartbeat("c1", 20.0)
    m.heartbeat("c2", 20.0)
    m.tick(20.0)
    events = [e for e in m.take_events() if isinstance(e, SegmentStateChanged)]
    assert events == [
        SegmentStateChanged(1.0, "a", "DRAINING"),
        SegmentStateChanged(20.0, "a", "DRAINED"),
    ]
    m.drain_segment("a", 21.0)  # idempotent
    m.unmount_segment("a", 21.0)
    with pytest.raises(ConflictError, match="UNMOUNTING, cannot drain"):
        m.drain_segment("a", 22.0)


def test_expiry_hold_delays_forgetting_not_suspicion(make_master: MakeMaster) -> None:
    m = two_nodes(make_master, heartbeat_interval_s=1.0)
    m.hold_expiry(25.0)
    m.hold_expiry(20.0)  # a hold only ever grows
    assert m.expire_clients(24.999) == []
    assert m.expire_clients(25.0) == ["c1", "c2"]
