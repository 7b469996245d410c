"""Wire conversions: every core value survives the trip through store.proto."""

from __future__ import annotations

import pytest

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.store import (
    ClientExpired,
    ConflictError,
    ErrorCode,
    Event,
    ObjectPinned,
    ObjectRemoved,
    ObjectStored,
    ObjectUnpinned,
    RemoveReason,
    ReplicaDropped,
    ReplicateConfig,
    SegmentMounted,
    SegmentStateChanged,
    SegmentUnmounted,
    Slice,
    StoreError,
    UnmountReason,
)
from mooncake_core.store import convert as cv

REPS = ((Slice("a", 0, 4096), Slice("b", 64, 10)), (Slice("c", 128, 4106),))


def test_replicas_and_config_round_trip() -> None:
    assert cv.replicas_from_pb(cv.replicas_to_pb(REPS)) == REPS
    for cfg in [
        ReplicateConfig(),
        ReplicateConfig(replica_num=3, soft_pin=True, soft_pin_ttl_s=5.0),
        ReplicateConfig(hard_pin=True, preferred_segments=("x", "y"), local_first=True),
    ]:
        assert cv.config_from_pb(cv.config_to_pb(cfg)) == cfg


def test_errors_round_trip_to_the_same_family() -> None:
    msg = cv.error_to_pb(ConflictError(ErrorCode.OBJECT_LEASED, "leased for 1 s"))
    assert msg.code == pb.OBJECT_LEASED
    with pytest.raises(ConflictError, match="leased for 1 s") as ei:
        cv.raise_for(msg)
    assert ei.value.code == ErrorCode.OBJECT_LEASED
    cv.raise_for(cv.error_to_pb(None))
    odd = cv.error_from_pb(pb.Error(code=999, message="?"))
    assert isinstance(odd, StoreError) and odd.code == ErrorCode.INTERNAL


def test_proto_enums_match_the_core() -> None:
    for code in ErrorCode:
        assert pb.ErrorCode.Value(code.name) == code.value


@pytest.mark.parametrize(
    "event",
    [
        ObjectStored(100.0, "k", 10, REPS),
        ObjectRemoved(100.0, "k", RemoveReason.SEGMENT_LOST, True),
        ReplicaDropped(100.0, "k", "a", 1),
        ObjectPinned(100.0, "p/", True, False, 130.0),
        ObjectPinned(100.0, "k", False, True, None),
        ObjectUnpinned(100.0, "k", False, True),
        SegmentMounted(100.0, "a", "c1", 4096),
        SegmentStateChanged(100.0, "a", "DRAINING"),
        SegmentUnmounted(100.0, "a", UnmountReason.CLIENT_EXPIRED),
        ClientExpired(100.0, "c1"),
    ],
)
def test_events_round_trip(event: Event) -> None:
    # The master stamps its wall time; with the same instant the event comes back equal.
    msg = cv.event_to_pb(event, seq=7, unix_time=event.at)
    assert msg.seq == 7
    assert cv.event_from_pb(msg) == event
