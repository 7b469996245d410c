"""Allocation strategies and slicing: which segment gets each slice, exactly."""

from __future__ import annotations

import random

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import CapacityError, ErrorCode, ReplicateConfig, Slice
from mooncake_core.store.placement import slice_lengths

SEGS = [("a", "c1", 10_000), ("b", "c2", 10_000), ("c", "c3", 10_000)]


def test_slice_lengths() -> None:
    assert slice_lengths(10_000, 4096) == [4096, 4096, 1808]
    assert slice_lengths(8192, 4096) == [4096, 4096]
    assert slice_lengths(5, 4096) == [5]


def test_large_object_is_sliced_over_segments(make_master: MakeMaster) -> None:
    m = make_master(SEGS, allocation_strategy="free_ratio_first", max_slice_size=4096)
    (rep,) = m.put_start("big", 10_000, "c1", 0.0)
    assert rep == (Slice("a", 0, 4096), Slice("b", 0, 4096), Slice("c", 0, 1808))


def test_replicas_never_share_a_segment(make_master: MakeMaster) -> None:
    m = make_master(SEGS, allocation_strategy="free_ratio_first", max_slice_size=4096)
    r0, r1 = m.put_start("big", 10_000, "c1", 0.0, ReplicateConfig(replica_num=2))
    # Replica 0 may take two segments but must leave one for replica 1.
    assert r0 == (Slice("a", 0, 4096), Slice("b", 0, 4096), Slice("a", 4096, 1808))
    assert r1 == (Slice("c", 0, 4096), Slice("c", 4096, 4096), Slice("c", 8192, 1808))


def test_three_replicas_on_three_segments(make_master: MakeMaster) -> None:
    m = make_master(SEGS, seed=5)
    reps = m.put_start("k", 100, "c1", 0.0, ReplicateConfig(replica_num=3))
    assert sorted(r[0].segment for r in reps) == ["a", "b", "c"]


def test_random_is_seeded_and_uses_every_segment(make_master: MakeMaster) -> None:
    def placements(seed: int) -> list[str]:
        m = make_master(SEGS, seed=seed)
        return [m.put_start(f"k{i}", 10, "c1", 0.0)[0][0].segment for i in range(12)]

    assert placements(0) == placements(0)
    # Exactly the injected RNG's draws over the name-ordered candidates.
    rng = random.Random(0)
    assert placements(0) == ["abc"[rng.randrange(3)] for _ in range(12)]
    assert set(placements(1)) == {"a", "b", "c"}


def test_free_ratio_first_picks_emptiest(make_master: MakeMaster) -> None:
    m = make_master(
        [("a", "c1", 1000), ("b", "c2", 2000), ("c", "c3", 1000)],
        allocation_strategy="free_ratio_first",
    )
    got = [m.put_start(f"k{i}", 400, "c1", 0.0)[0][0].segment for i in range(4)]
    # a, then b (1.0 > 0.6), then c (1.0), then b (0.8 > 0.6, 0.6)
    assert got == ["a", "b", "c", "b"]


def test_local_first_prefers_the_writers_segments(make_master: MakeMaster) -> None:
    m = make_master([*SEGS, ("b2", "c2", 20000)])
    cfg = ReplicateConfig(local_first=True)
    got = [m.put_start(f"k{i}", 4000, "c2", 0.0, cfg)[0][0].segment for i in range(3)]
    # Emptiest local segment first; ties go to the first name.
    assert got == ["b", "b2", "b2"]
    # Replica 2 cannot be local too: distinct segments win over locality.
    r0, r1 = m.put_start("two", 100, "c2", 0.0, ReplicateConfig(replica_num=2, local_first=True))
    assert {r0[0].segment, r1[0].segment} & {"b", "b2"}


def test_local_first_config_strategy_falls_back_for_remote_writers(
    make_master: MakeMaster,
) -> None:
    m = make_master(SEGS, allocation_strategy="local_first")
    assert m.put_start("x", 10, "c3", 0.0)[0][0].segment == "c"
    assert m.put_start("y", 10, "nobody", 0.0)[0][0].segment in {"a", "b", "c"}


def test_preferred_segments_in_order_then_fallback(make_master: MakeMaster) -> None:
    m = make_master(SEGS, allocation_strategy="free_ratio_first")
    cfg = ReplicateConfig(preferred_segments=("c", "a"))
    assert m.put_start("k1", 6000, "c1", 0.0, cfg)[0][0].segment == "c"
    assert m.put_start("k2", 6000, "c1", 0.0, cfg)[0][0].segment == "a"  # c is full
    assert m.put_start("k3", 6000, "c1", 0.0, cfg)[0][0].segment == "b"  # both full
    two = m.put_start(
        "k4", 10, "c1", 0.0, ReplicateConfig(replica_num=2, preferred_segments=("a",))
    )
    assert next(r[0].segment for r in two) == "a"


def test_unknown_preferred_names_fall_back(make_master: MakeMaster) -> None:
    m = make_master(SEGS, allocation_strategy="free_ratio_first")
    cfg = ReplicateConfig(preferred_segments=("zz",))
    assert m.put_start("k", 10, "c1", 0.0, cfg)[0][0].segment == "a"


def test_replica_num_above_usable_segments(make_master: MakeMaster) -> None:
    m = make_master(SEGS)
    m.unmount_segment("c", 0.0)
    with pytest.raises(CapacityError) as ei:
        m.put_start("k", 10, "c1", 0.0, ReplicateConfig(replica_num=3))
    assert ei.value.code == ErrorCode.NO_AVAILABLE_SEGMENT
    assert "3 distinct segments; 2 usable" in ei.value.message


def test_unknown_strategy_name_is_rejected_by_config() -> None:
    from pydantic import ValidationError

    from mooncake_core.config.models import MasterConfig

    with pytest.raises(ValidationError):
        MasterConfig(allocation_strategy="nearest")  # type: ignore[arg-type]
