"""Store master events reach the prefix index as block events."""

from __future__ import annotations

from mooncake_core.conductor import PrefixIndex, Tier, block_store_key
from mooncake_core.conductor.store_feed import StoreFeed
from mooncake_core.store import (
    ObjectRemoved,
    ObjectStored,
    RemoveReason,
    ReplicaDropped,
    SegmentUnmounted,
    Slice,
    UnmountReason,
)

DRAM = Tier.DRAM


def stored(key: str, *segments: str) -> ObjectStored:
    return ObjectStored(0.0, key, 10, tuple((Slice(s, 0, 10),) for s in segments))


def test_store_events_feed_the_index() -> None:
    ix = PrefixIndex()
    feed = StoreFeed("m")
    k1, k2 = block_store_key("m", 1), block_store_key("m", 2)
    assert feed.apply(stored(k1, "store-0", "store-1"), ix) == 2
    feed.apply(stored(k2, "store-0"), ix)
    assert ix.match([1, 2]).by_holder == {("store-0", DRAM): 2, ("store-1", DRAM): 1}
    feed.apply(ReplicaDropped(1.0, k1, "store-1", 1), ix)
    assert ix.holders_of(1) == [("store-0", DRAM)]
    feed.apply(ObjectRemoved(2.0, k2, RemoveReason.EVICTED, True), ix)
    assert ix.match([1, 2]).by_holder == {("store-0", DRAM): 1}
    feed.apply(SegmentUnmounted(3.0, "store-0", UnmountReason.CLIENT_EXPIRED), ix)
    assert ix.match([1]).best_len == 0


def test_other_objects_and_models_are_ignored() -> None:
    ix = PrefixIndex()
    feed = StoreFeed("m", location_of=lambda seg: seg.split(":")[0])
    assert feed.translate(stored("user/blob", "store-0"), ix) == []
    assert feed.translate(stored(block_store_key("other", 1), "store-0"), ix) == []
    assert feed.translate(SegmentUnmounted(0.0, "store-9", UnmountReason.UNMOUNTED), ix) == []
    feed.apply(stored(block_store_key("m", 5), "store-0:dram0"), ix)
    assert ix.holders_of(5) == [("store-0", DRAM)]
