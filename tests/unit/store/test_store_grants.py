"""Grants in the master core: the space of a writer's next put, handed out ahead."""

from __future__ import annotations

from typing import Any

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store.errors import ConflictError, ErrorCode, InvalidArgumentError, StoreError
from mooncake_core.store.events import ObjectStored
from mooncake_core.store.master.grants import MAX_BATCH, MAX_PER_CLIENT

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


# ------------------------------------------------------------------ batches
def test_a_batch_grant_is_one_run_and_its_commit_stores_each_key(
    make_master: MakeMaster,
) -> None:
    m = two(make_master)
    got = m.grant_batch("w", 30, 8, ONE, 1.0)
    ids = [g for g, _ in got]
    slices = [reps[0][0] for _, reps in got]
    # One free range cut in eight, on one segment, consecutive ids (one wire "run").
    assert len({s.segment for s in slices}) == 1
    assert [s.offset - slices[0].offset for s in slices] == [30 * k for k in range(8)]
    assert ids == list(range(ids[0], ids[0] + 8))
    assert (m.grant_count(), m.snapshot().allocated_bytes, m.snapshot().key_count) == (8, 240, 0)
    keys = [f"k{k}" for k in range(8)]
    assert m.batch_put_commit("w", keys, ids, 30, 2.0) == [None] * 8
    assert m.take_events() == [
        ObjectStored(2.0, k, 30, reps) for k, (_, reps) in zip(keys, got, strict=True)
    ]
    for k, (_, reps) in zip(keys, got, strict=True):
        assert m.get_replica_list(k, 3.0).replicas == reps
    assert (m.grant_count(), m.snapshot().allocated_bytes) == (0, 240)
    # Each object's range is its own: removing one frees exactly its bytes (held for
    # the read lease taken above first).
    m.remove("k3", 9.0, force=True)
    k3 = slices[3]
    assert m.held_ranges() == [(k3.segment, k3.offset, 30, 13.0)]
    m.remove("k4", 20.0, force=True)
    for c in ("c1", "c2"):
        m.heartbeat(c, 20.0)
    m.tick(20.0)
    assert m.snapshot().allocated_bytes == 180


def test_batch_grants_are_bounded_all_or_none_and_never_evict(make_master: MakeMaster) -> None:
    m = two(make_master, put_grant_max_bytes=400, eviction_high_watermark=0.9)
    assert m.grant_batch("w", 401, 2, ONE, 1.0) == []  # above put_grant_max_bytes
    assert m.grant_batch("w", 1, MAX_BATCH + 1, ONE, 1.0) == []
    assert m.grant_batch("w", 100, 17, ONE, 1.0) == []  # > MAX_PER_CLIENT x 400 bytes
    assert m.grant_batch("w", 10, 0, ONE, 1.0) == []
    assert m.grant_batch("w", 0, 3, ONE, 1.0) == []
    assert m.grant_batch("w", 10, 3, ReplicateConfig(replica_num=3), 1.0) == []  # 2 segments
    assert m.snapshot().allocated_bytes == 0
    assert len(m.grant_batch("w", 1, MAX_BATCH - 1, ONE, 1.0)) == MAX_BATCH - 1
    assert m.grant_batch("w", 1, 2, ONE, 1.0) == []  # its batch grants would pass MAX_BATCH
    # Single grants are counted apart.
    assert [m.grant_put("w", 1, ONE, 1.0) is not None for _ in range(MAX_PER_CLIENT)] == [
        True
    ] * MAX_PER_CLIENT
    # Past the high watermark nothing is granted and nothing evicted; an unfit batch
    # leaves nothing allocated.
    m.put_start("old", 700, "x", 1.0)
    m.put_end("old", 1.0)
    before = m.snapshot().allocated_bytes  # 959 of 2000: 900 more passes 90%
    assert m.grant_batch("v", 100, 9, ONE, 2.0) == []
    assert (m.snapshot().allocated_bytes, m.exist("old", 2.0)) == (before, True)
    assert (
        make_master([("a", "c", 1000)], put_grant_max_bytes=0).grant_batch("w", 1, 1, ONE, 1.0)
        == []
    )


def test_a_fragmented_store_places_a_batch_grant_piece_by_piece(make_master: MakeMaster) -> None:
    m = make_master([("a", "c1", 1000)], eviction_high_watermark=1.0)
    for k in range(10):  # 10 x 100 bytes, every other one removed: no 200-byte hole
        m.put_start(f"f{k}", 100, "c1", 0.0)
        m.put_end(f"f{k}", 0.0)
    for k in range(0, 10, 2):
        m.remove(f"f{k}", 0.0, force=True)
    got = m.grant_batch("w", 100, 5, ONE, 1.0)
    assert sorted(r[0][0].offset for _, r in got) == [0, 200, 400, 600, 800]
    assert m.grant_batch("w", 100, 1, ONE, 1.0) == []  # full
    assert m.batch_put_commit("w", ["a", "b"], [got[0][0], got[1][0]], 100, 2.0) == [None, None]


def _grants_for(m: MasterState, cfgs: list[tuple[str, ReplicateConfig]]) -> list[list[int]]:
    return [[g for g, _ in m.grant_batch(c, 40, 4, cfg, 1.0)] for c, cfg in cfgs]


@pytest.mark.parametrize("ssd", [0, 4096])
def test_a_batch_commit_of_mixed_items_matches_the_commits_one_by_one(
    make_master: MakeMaster, ssd: int
) -> None:
    """Every kind of item a batch commit may carry gets the outcome, the objects and
    the events that committing the items one by one gives: fine ones, a key given
    twice, a grant used twice, a key present, bad keys, another client's grant, an
    unknown grant, grants of pinned or two-replica puts, with and without an SSD tier."""
    cfgs = [
        ("w", ONE),
        ("w", ReplicateConfig(replica_num=1, soft_pin=True)),
        ("w", ReplicateConfig(replica_num=2)),
        ("v", ONE),
    ]
    items: list[tuple[object, tuple[int, int] | int]] = [
        ("a", (0, 0)),
        ("b", (0, 1)),
        ("a", (3, 2)),  # the key again
        ("c", (0, 1)),  # the grant again
        ("x/1", (0, 3)),  # present
        ("", (1, 0)),
        ("k" * 17, (1, 1)),  # longer than max_key_length
        ("ключ", (1, 2)),  # not ASCII, fits once encoded
        ("s\udc80", (1, 3)),  # no UTF-8 form
        (7, (2, 0)),
        ("pinned", (1, 0)),
        ("two", (2, 1)),
        ("theirs", (3, 0)),
        ("unknown", 12345),
        ("d", (0, 3)),
        ("p1", (3, 1)),  # another client's
        ("p2", (0, 2)),
    ]

    def build() -> tuple[MasterState, list[list[int]]]:
        m = make_master(max_key_length=16)
        for name, client in (("a", "c1"), ("b", "c2")):
            m.mount_segment(name, client, 4000, 0.0, ssd_capacity=ssd)
        m.pin("p", 0.0, prefix=True)  # on an SSD tier, its keys are written through
        m.put_start("x/1", 10, "c1", 0.0)
        m.put_end("x/1", 0.0)
        ids = _grants_for(m, cfgs)
        m.take_events()
        return m, ids

    def gid(ids: list[list[int]], ref: tuple[int, int] | int) -> int:
        return ref if isinstance(ref, int) else ids[ref[0]][ref[1]]

    (one, ids1), (many, ids2) = build(), build()
    expected: list[object] = []
    for key, ref in items:
        try:
            one.put_commit("w", key, gid(ids1, ref), 40, 2.0)  # type: ignore[arg-type]
            expected.append(None)
        except StoreError as exc:
            expected.append((exc.code, exc.message.replace(str(gid(ids1, ref)), "G")))
    keys: list[Any] = [k for k, _ in items]  # not all strings, on purpose
    got = many.batch_put_commit("w", keys, [gid(ids2, r) for _, r in items], 40, 2.0)
    named = [
        None if r is None else (r.code, r.message.replace(str(gid(ids2, ref)), "G"))
        for r, (_, ref) in zip(got, items, strict=True)
    ]
    assert named == expected
    assert expected.count(None) == 7  # a, b, ключ, pinned, two, d, p2
    assert many.take_events() == one.take_events()
    assert (many.snapshot(), many.list_keys(), many.list_pins(2.0)) == (
        one.snapshot(),
        one.list_keys(),
        one.list_pins(2.0),
    )
    assert [many.stat(e.key, 2.0) for e in many.list_keys().entries] == [
        one.stat(e.key, 2.0) for e in one.list_keys().entries
    ]
    assert many.granted_ranges() == one.granted_ranges()
    assert many.tier.changes == one.tier.changes  # what the SSD offloader watches
    stored = [e.key for e in one.list_keys().entries]
    assert [many.objects[k].token for k in stored] == [one.objects[k].token for k in stored]
    for name in ("a", "b"):
        free = [m.segments.get(name).allocator.free_list() for m in (many, one)]
        assert free[0] == free[1]
    left = (ids2[3][3], ids1[3][3])  # unused: another size is refused, the grant stays
    for m, g in zip((many, one), left, strict=True):
        (e,) = m.batch_put_commit("v", ["q"], [g], 39, 2.0)
        assert e is not None and e.code == ErrorCode.STALE
    assert many.batch_put_commit("v", ["q"], [left[0]], 40, 2.0) == [None]
    with pytest.raises(ValueError):  # keys and grants must pair
        many.batch_put_commit("w", ["e"], [], 40, 2.0)
