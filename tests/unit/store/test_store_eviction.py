"""Eviction: exact LRU order, triggers, and what is never evicted."""

from __future__ import annotations

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import (
    CapacityError,
    ErrorCode,
    MasterState,
    ObjectRemoved,
    RemoveReason,
    ReplicateConfig,
    Slice,
)


def fill(m: MasterState, keys: list[str], size: int, now: float = 0.0) -> None:
    for k in keys:
        m.put_start(k, size, "c1", now)
        m.put_end(k, now)


def evicted(m: MasterState) -> list[str]:
    return [
        e.key
        for e in m.take_events()
        if isinstance(e, ObjectRemoved) and e.reason == RemoveReason.EVICTED
    ]


def test_lru_order_over_several_rounds(make_master: MakeMaster) -> None:
    # 10 slots of 100 bytes; each round evicts ceil(0.2 * complete objects).
    m = make_master([("s", "c1", 1000)], eviction_ratio=0.2, lease_ttl_s=1.0)
    fill(m, [f"k{i}" for i in range(10)], 100)
    for t, k in [(1.0, "k3"), (2.0, "k0"), (3.0, "k7"), (4.0, "k1")]:
        m.get_replica_list(k, t)  # reads make these the most recent
    m.take_events()
    m.put_start("n0", 100, "c1", 10.0)  # full: round of ceil(0.2 * 10) = 2
    assert evicted(m) == ["k2", "k4"]
    m.put_end("n0", 10.0)
    m.put_start("n1", 100, "c1", 11.0)  # one hole left: no eviction
    m.put_end("n1", 11.0)
    assert evicted(m) == []
    m.put_start("n2", 250, "c1", 12.0)  # needs 250 contiguous
    # Layout k0 k1 n0 k3 n1 k5 k6 k7 k8 k9: rounds of 2, 2, 2 leave no 250-byte hole
    # (k7 splits 500..1000); the 4th round (ceil(0.2 * 4) = 1) takes k7 and it fits.
    assert evicted(m) == ["k5", "k6", "k8", "k9", "k3", "k0", "k7"]
    assert m.snapshot().eviction_rounds_total == 5
    assert [e.key for e in m.list_keys().entries] == ["k1", "n0", "n1", "n2"]
    assert m.stat("n2", 12.0).replicas == ((Slice("s", 500, 250),),)


def test_watermark_round_in_tick(make_master: MakeMaster) -> None:
    m = make_master(
        [("s", "c1", 1000)], eviction_high_watermark=0.5, eviction_ratio=0.25, lease_ttl_s=1.0
    )
    fill(m, [f"k{i}" for i in range(6)], 100)  # 60 % used
    m.tick(1.0)
    assert evicted(m) == ["k0", "k1"]  # ceil(0.25 * 6) = 2
    m.tick(2.0)
    assert evicted(m) == []  # 40 % <= 50 %


def test_exist_and_stat_do_not_count_as_access(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 300)], eviction_ratio=0.01)
    fill(m, ["a", "b", "c"], 100)
    for t in range(1, 50):
        assert m.exist("a", float(t))
        m.stat("a", float(t))
    m.take_events()
    m.put_start("d", 100, "c1", 60.0)
    assert evicted(m) == ["a"]  # probing did not keep it alive


def test_leased_objects_survive_until_the_lease_ends(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 200)], lease_ttl_s=5.0, eviction_ratio=0.5)
    fill(m, ["a", "b"], 100)
    m.get_replica_list("a", 1.0)  # lease until 6.0
    m.get_replica_list("b", 1.0)
    m.take_events()
    with pytest.raises(CapacityError) as ei:
        m.put_start("c", 100, "c1", 5.9)
    assert ei.value.code == ErrorCode.STORE_FULL
    assert evicted(m) == []
    m.put_start("c", 100, "c1", 6.0)  # leases over: LRU "a" goes
    assert evicted(m) == ["a"]


def test_incomplete_objects_are_never_evicted(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 200)])
    m.put_start("writing", 100, "c1", 0.0)
    fill(m, ["done"], 100)
    m.put_start("new", 100, "c1", 1.0)
    assert evicted(m) == ["done"]
    assert m.stat("writing", 1.0).state.name == "PROCESSING"


def test_pin_precedence_hard_never_soft_last(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 300)], eviction_ratio=0.01)
    m.put_start("hard", 100, "c1", 0.0, ReplicateConfig(hard_pin=True))
    m.put_end("hard", 0.0)
    m.put_start("soft", 100, "c1", 0.0, ReplicateConfig(soft_pin=True))
    m.put_end("soft", 0.0)
    fill(m, ["plain"], 100)
    m.take_events()
    m.put_start("n1", 100, "c1", 1.0)
    m.put_end("n1", 1.0)
    assert evicted(m) == ["plain"]  # the LRU soft and hard ones are skipped
    m.put_start("n2", 100, "c1", 2.0)
    m.put_end("n2", 2.0)
    assert evicted(m) == ["n1"]  # still an unpinned one newer than "soft"
    m.get_replica_list("n2", 2.0)
    m.put_start("n3", 100, "c1", 20.0)  # n2 lease over at 12; n2 goes before soft
    assert evicted(m) == ["n2"]
    m.put_end("n3", 20.0)
    m.pin("n3", 20.0, hard=True)
    m.take_events()
    m.put_start("n4", 100, "c1", 21.0)  # only soft left: evicted now
    assert evicted(m) == ["soft"]
    m.pin("n4", 21.0, hard=True)
    with pytest.raises(CapacityError, match="nothing left to evict"):
        m.put_start("n5", 100, "c1", 22.0)
    assert m.pin_level("hard", 22.0).name == "HARD"


def test_soft_pinned_kept_when_disabled(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 100)], evict_soft_pinned=False)
    m.put_start("soft", 100, "c1", 0.0, ReplicateConfig(soft_pin=True))
    m.put_end("soft", 0.0)
    with pytest.raises(CapacityError):
        m.put_start("n", 100, "c1", 1.0)
    assert m.exist("soft", 1.0)


def test_watermark_evicts_soft_only_if_still_above(make_master: MakeMaster) -> None:
    def build(watermark: float) -> MasterState:
        m = make_master([("s", "c1", 1000)], eviction_high_watermark=watermark, eviction_ratio=1.0)
        for i in range(4):
            m.put_start(f"s{i}", 100, "c1", 0.0, ReplicateConfig(soft_pin=True))
            m.put_end(f"s{i}", 0.0)
        fill(m, ["p"], 100)
        m.take_events()
        return m

    m = build(0.45)  # 50 % used; dropping "p" is enough
    m.tick(1.0)
    assert evicted(m) == ["p"]
    m = build(0.30)  # still above after "p": soft-pinned go too, LRU first
    m.tick(1.0)
    assert evicted(m) == ["p", "s0", "s1", "s2", "s3"]


def test_expired_soft_pin_is_plain_again(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 200)], eviction_ratio=0.01)
    m.put_start("a", 100, "c1", 0.0, ReplicateConfig(soft_pin=True, soft_pin_ttl_s=5.0))
    m.put_end("a", 0.0)
    fill(m, ["b"], 100, now=1.0)
    m.take_events()
    m.put_start("c", 100, "c1", 5.0)  # a's pin over at 5.0: a is LRU and plain
    assert evicted(m) == ["a"]


def test_hopeless_object_evicts_nothing(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 1000)], max_slice_size=4096)
    fill(m, ["a"], 100)
    with pytest.raises(CapacityError, match="cannot fit"):
        m.put_start("huge", 1001, "c1", 1.0)
    assert evicted(m) == [] and m.exist("a", 1.0)
