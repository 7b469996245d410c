"""Grants in the master core: the space of a writer's next put, handed out ahead."""

from __future__ import annotations

from typing import Any

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store.errors import ConflictError, ErrorCode, InvalidArgumentError
from mooncake_core.store.events import ObjectStored
from mooncake_core.store.master.grants import MAX_PER_CLIENT

ONE = ReplicateConfig(replica_num=1)


def two(make_master: MakeMaster, **cfg: Any) -> MasterState:
    return make_master([("a", "c1", 1000), ("b", "c2", 1000)], **cfg)


def test_a_committed_grant_is_the_object_readable_at_once(make_master: MakeMaster) -> None:
    m = two(make_master)
    gid, reps = m.grant_put("w", 300, ONE, 1.0)
    assert m.snapshot().allocated_bytes == 300
    assert m.snapshot().key_count == 0  # no object until the commit
    m.take_events()
    m.put_commit("w", "k", gid, 300, 2.0)
    got = m.get_replica_list("k", 3.0)
    assert (got.size, got.replicas) == (300, reps)
    assert m.take_events() == [ObjectStored(2.0, "k", 300, reps)]
    assert m.snapshot().allocated_bytes == 300  # the grant's space, no more
    assert m.grant_count() == 0
    with pytest.raises(ConflictError) as e:  # used up
        m.put_commit("w", "k2", gid, 300, 2.0)
    assert e.value.code == ErrorCode.STALE


def test_a_commit_that_does_not_match_changes_nothing(make_master: MakeMaster) -> None:
    m = two(make_master)
    gid, reps = m.grant_put("w", 300, ONE, 1.0)
    m.put_start("taken", 10, "x", 1.0)
    for client, key, size, code in [
        ("other", "k", 300, ErrorCode.STALE),  # another client's grant
        ("w", "k", 299, ErrorCode.STALE),  # another size
        ("w", "taken", 300, ErrorCode.OBJECT_ALREADY_EXISTS),
    ]:
        with pytest.raises(ConflictError) as e:
            m.put_commit(client, key, gid, size, 2.0)
        assert e.value.code == code
    with pytest.raises(InvalidArgumentError):
        m.put_commit("w", "", gid, 300, 2.0)
    m.put_commit("w", "k", gid, 300, 2.0)  # the grant survived every refusal
    assert m.get_replica_list("k", 3.0).replicas == reps


def test_released_grant_is_free_at_once_and_unused_one_held_for_its_writer(
    make_master: MakeMaster,
) -> None:
    m = two(make_master, put_timeout_s=30.0, put_release_s=100.0)
    g1, _ = m.grant_put("w", 300, ONE, 10.0)
    g2, reps2 = m.grant_put("w", 200, ONE, 20.0)
    assert not m.release_grant("other", g1)  # not its grant
    assert m.release_grant("w", g1)
    assert m.snapshot().allocated_bytes == 200
    assert m.discard_stale_grants(49.999) == 0
    assert m.discard_stale_grants(50.0) == 1
    (sl,) = reps2[0]
    # A writer that stalled mid-transfer still writes into it until put_release_s.
    assert m.held_ranges() == [(sl.segment, sl.offset, 200, 120.0)]
    with pytest.raises(ConflictError):
        m.put_commit("w", "k", g2, 200, 50.0)
    for t in (119.9, 120.0):
        m.heartbeat("c1", t)
        m.heartbeat("c2", t)
        m.tick(t)
    assert (m.held_ranges(), m.snapshot().allocated_bytes) == ([], 0)


def test_grants_are_bounded_and_never_evict(make_master: MakeMaster) -> None:
    m = two(make_master, put_grant_max_bytes=400, eviction_high_watermark=0.5)
    assert m.grant_put("w", 401, ONE, 1.0) is None  # above put_grant_max_bytes
    got = [m.grant_put("w", 100, ONE, 1.0) for _ in range(MAX_PER_CLIENT + 1)]
    assert [g is not None for g in got] == [True] * MAX_PER_CLIENT + [False]
    assert m.grant_put("v", 100, ONE, 1.0) is not None  # another client's own limit
    m.put_start("old", 400, "x", 1.0)
    m.put_end("old", 1.0)  # 900 of 2000 used: 100 more reaches the watermark
    assert m.grant_put("v", 100, ONE, 2.0) is not None
    assert m.grant_put("v", 64, ONE, 2.0) is None  # past 50%: no grant, no eviction
    assert m.exist("old", 2.0)
    assert (
        make_master([("a", "c1", 1000)], put_grant_max_bytes=0).grant_put("w", 1, ONE, 1.0) is None
    )


def test_a_grant_on_a_removed_segment_is_forgotten_and_its_other_slices_held(
    make_master: MakeMaster,
) -> None:
    m = two(make_master, put_release_s=100.0)
    gid, reps = m.grant_put("w", 300, ReplicateConfig(replica_num=2), 5.0)
    assert {r[0].segment for r in reps} == {"a", "b"}
    m.unmount_segment("a", 6.0)
    m.finish_unmounts(6.0 + m.config.unmount_grace_s)
    on_b = next(r[0] for r in reps if r[0].segment == "b")
    assert m.held_ranges() == [("b", on_b.offset, 300, 105.0)]
    with pytest.raises(ConflictError) as e:
        m.put_commit("w", "k", gid, 300, 12.0)
    assert e.value.code == ErrorCode.STALE


def test_grant_ids_are_never_reused_by_another_core(make_master: MakeMaster) -> None:
    # A core rebuilt from the journal (same process) must not hand a client an id it
    # may still hold from the old core for another range.
    a = two(make_master).grant_put("w", 100, ONE, 1.0)
    b = two(make_master).grant_put("w", 100, ONE, 1.0)
    assert a is not None and b is not None and a[0] != b[0]


def test_draining_a_segment_withdraws_its_grants_and_leaves_it_empty(
    make_master: MakeMaster,
) -> None:
    m = two(make_master, put_release_s=100.0)
    gid, reps = m.grant_put("w", 300, ReplicateConfig(replica_num=2), 5.0)
    on_b = next(r[0] for r in reps if r[0].segment == "b")
    m.drain_segment("a", 6.0)
    seg_a = next(s for s in m.snapshot().segments if s.name == "a")
    assert (seg_a.state.name, seg_a.used) == ("DRAINED", 0)  # empty, as drained means
    assert m.held_ranges() == [("b", on_b.offset, 300, 105.0)]  # b's slice: its writer's
    with pytest.raises(ConflictError) as e:  # the writer puts elsewhere
        m.put_commit("w", "k", gid, 300, 7.0)
    assert e.value.code == ErrorCode.STALE
    # Undrained while the writer may still write there: a's slice is held again.
    m.undrain_segment("a", 8.0)
    on_a = next(r[0] for r in reps if r[0].segment == "a")
    assert ("a", on_a.offset, 300, 105.0) in m.held_ranges()
    for t in (104.9, 105.0):
        m.heartbeat("c1", t)
        m.heartbeat("c2", t)
        m.tick(t)
    assert (m.held_ranges(), m.snapshot().allocated_bytes) == ([], 0)
