"""Writes, reads and removals: zombie puts, upsert, batches, listing, bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import (
    CapacityError,
    ConflictError,
    ErrorCode,
    GetResult,
    InvalidArgumentError,
    KeyEntry,
    MasterState,
    NotFoundError,
    ObjectRemoved,
    ObjectState,
    ObjectStored,
    RemoveReason,
    ReplicateConfig,
    Slice,
    StoreError,
)


def base(make_master: MakeMaster, **cfg: Any) -> MasterState:
    m = make_master([("a", "c1", 1000), ("b", "c2", 1000)], put_timeout_s=30.0, **cfg)
    for k in ("x/1", "x/2", "y/1"):
        m.put_start(k, 100, "c1", 0.0, ReplicateConfig(preferred_segments=("a",)))
        m.put_end(k, 0.0)
    m.pin("x/1", 0.0)
    m.take_events()
    return m


def fingerprint(m: MasterState) -> tuple[object, ...]:
    return (
        m.snapshot(),
        m.list_keys(),
        m.list_pins(1.0),
        [m.stat(e.key, 1.0) for e in m.list_keys().entries],
    )


def test_zombie_put_start_is_reclaimed(make_master: MakeMaster) -> None:
    # The key is free after put_timeout_s; the space only after put_release_s, so a
    # writer that stalled mid-transfer still writes its own range, nobody else's.
    m = base(make_master, put_release_s=100.0)
    z = m.put_start("z", 500, "c1", 10.0)
    m.put_start("later", 10, "c1", 20.0)
    assert m.discard_stale_puts(39.999) == []
    assert m.discard_stale_puts(40.0) == ["z"]
    assert m.take_events() == [ObjectRemoved(40.0, "z", RemoveReason.EXPIRED, False, z, True)]
    with pytest.raises(NotFoundError):
        m.put_end("z", 41.0)
    m.put_end("later", 41.0)
    (sl,) = z[0]
    assert m.held_ranges() == [(sl.segment, sl.offset, 500, 110.0)]
    snap = m.snapshot()
    assert (snap.allocated_bytes, snap.expired_puts_total) == (810, 1)
    m.put_start("z", 500, "c1", 41.0)  # the key again: placed elsewhere
    assert m.stat("z", 41.0).replicas != z
    m.put_revoke("z", 42.0)  # its own writer's revoke: freed at once
    assert m.snapshot().allocated_bytes == 810
    for t in (109.9, 110.0):
        m.heartbeat("c1", t)
        m.heartbeat("c2", t)
        m.tick(t)
        if t < 110.0:
            assert m.snapshot().allocated_bytes == 810
    assert (m.held_ranges(), m.snapshot().allocated_bytes) == ([], 310)


def test_forced_remove_of_a_write_holds_its_range_for_the_writer(
    make_master: MakeMaster,
) -> None:
    m = base(make_master, put_release_s=100.0)
    w = m.put_start("w", 200, "c1", 5.0)
    m.remove("w", 6.0, force=True)
    (sl,) = w[0]
    assert m.held_ranges() == [(sl.segment, sl.offset, 200, 105.0)]
    (ev,) = [e for e in m.take_events() if isinstance(e, ObjectRemoved)]
    assert (ev.held, ev.for_writer) == (w, True)
    assert m.put_start("v", 200, "c1", 7.0) != w  # never the range still being written


def test_readers_never_see_a_write_in_progress(make_master: MakeMaster) -> None:
    m = base(make_master)
    m.put_start("w", 10, "c1", 1.0)
    assert not m.exist("w", 1.0)
    with pytest.raises(ConflictError) as ei:
        m.get_replica_list("w", 1.0)
    assert ei.value.code == ErrorCode.OBJECT_NOT_READY
    with pytest.raises(ConflictError) as ei:
        m.put_start("w", 10, "c1", 1.0)
    assert ei.value.code == ErrorCode.OBJECT_ALREADY_EXISTS
    with pytest.raises(ConflictError) as ei:
        m.remove("w", 1.0)
    assert ei.value.code == ErrorCode.OBJECT_NOT_READY
    m.put_end("w", 2.0)
    with pytest.raises(ConflictError, match="already complete"):
        m.put_end("w", 2.0)
    with pytest.raises(ConflictError, match="use remove"):
        m.put_revoke("w", 2.0)
    assert m.get_replica_list("w", 3.0).size == 10


def test_revoke_frees_space(make_master: MakeMaster) -> None:
    m = base(make_master)
    m.put_start("r", 700, "c1", 1.0, ReplicateConfig(replica_num=2))
    m.put_revoke("r", 2.0)
    assert m.snapshot().allocated_bytes == 300
    assert m.take_events() == [ObjectRemoved(2.0, "r", RemoveReason.REVOKED, False)]


def test_upsert_replaces_and_keeps_the_key_pin(make_master: MakeMaster) -> None:
    m = base(make_master)
    reps = m.upsert_start("x/1", 50, "c1", 1.0, ReplicateConfig(preferred_segments=("b",)))
    assert reps == ((Slice("b", 0, 50),),)
    assert m.take_events() == [ObjectRemoved(1.0, "x/1", RemoveReason.REPLACED, True)]
    assert not m.exist("x/1", 1.0)  # the new value is not complete yet
    m.put_end("x/1", 2.0)
    assert m.get_replica_list("x/1", 2.0).size == 50
    assert m.pin_level("x/1", 2.0).name == "SOFT"
    assert m.upsert_start("new", 10, "c1", 3.0)  # plain put when absent


def test_upsert_without_space_keeps_the_old_value(make_master: MakeMaster) -> None:
    m = make_master([("a", "c1", 1000)])
    m.put_start("k", 600, "c1", 0.0)
    m.put_end("k", 0.0)
    m.take_events()
    with pytest.raises(CapacityError):
        m.upsert_start("k", 500, "c1", 1.0)  # the old value is protected from eviction
    assert m.get_replica_list("k", 1.0).size == 600
    assert m.take_events() == []


BAD_CALLS: list[tuple[str, Callable[[MasterState], object], ErrorCode]] = [
    ("empty key", lambda m: m.put_start("", 10, "c1", 1.0), ErrorCode.INVALID_KEY),
    ("long key", lambda m: m.put_start("k" * 17, 10, "c1", 1.0), ErrorCode.INVALID_KEY),
    ("long utf8 key", lambda m: m.put_start("é" * 9, 10, "c1", 1.0), ErrorCode.INVALID_KEY),
    ("zero size", lambda m: m.put_start("n", 0, "c1", 1.0), ErrorCode.INVALID_PARAMS),
    ("oversize", lambda m: m.put_start("n", 5001, "c1", 1.0), ErrorCode.OBJECT_TOO_LARGE),
    (
        "replica_num 0",
        lambda m: m.put_start("n", 10, "c1", 1.0, ReplicateConfig(replica_num=0)),
        ErrorCode.INVALID_PARAMS,
    ),
    (
        "too many replicas",
        lambda m: m.put_start("n", 10, "c1", 1.0, ReplicateConfig(replica_num=3)),
        ErrorCode.NO_AVAILABLE_SEGMENT,
    ),
    ("duplicate", lambda m: m.put_start("x/2", 10, "c1", 1.0), ErrorCode.OBJECT_ALREADY_EXISTS),
    ("hopeless", lambda m: m.put_start("n", 1001, "c1", 1.0), ErrorCode.STORE_FULL),
    ("empty client", lambda m: m.put_start("n", 10, "", 1.0), ErrorCode.INVALID_PARAMS),
    ("remove missing", lambda m: m.remove("nope", 1.0), ErrorCode.OBJECT_NOT_FOUND),
    ("get missing", lambda m: m.get_replica_list("nope", 1.0), ErrorCode.OBJECT_NOT_FOUND),
    ("end missing", lambda m: m.put_end("nope", 1.0), ErrorCode.OBJECT_NOT_FOUND),
    ("bad regex", lambda m: m.remove_by_regex("x/(", 1.0), ErrorCode.INVALID_PARAMS),
    ("empty prefix", lambda m: m.remove_by_prefix("", 1.0), ErrorCode.INVALID_PARAMS),
    ("bad limit", lambda m: m.list_keys(limit=0), ErrorCode.INVALID_PARAMS),
    ("unpin missing", lambda m: m.unpin("y/1", 1.0), ErrorCode.PIN_NOT_FOUND),
    ("mount clash", lambda m: m.mount_segment("a", "c9", 5, 1.0), ErrorCode.SEGMENT_ALREADY_EXISTS),
    ("drain missing", lambda m: m.drain_segment("zz", 1.0), ErrorCode.SEGMENT_NOT_FOUND),
]


@pytest.mark.parametrize(("what", "call", "code"), BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_calls_raise_and_change_nothing(
    make_master: MakeMaster, what: str, call: Callable[[MasterState], object], code: ErrorCode
) -> None:
    m = base(make_master, max_key_length=16, max_object_size=5000)
    before = fingerprint(m)
    with pytest.raises(StoreError) as ei:
        call(m)
    assert ei.value.code == code, ei.value.message
    assert fingerprint(m) == before
    assert m.take_events() == []


def test_error_messages_name_the_bad_value(make_master: MakeMaster) -> None:
    m = base(make_master, max_key_length=16)
    with pytest.raises(InvalidArgumentError, match="key of 17 bytes exceeds max_key_length 16"):
        m.put_start("k" * 17, 10, "c1", 1.0)
    with pytest.raises(InvalidArgumentError, match=r"invalid regex 'x/\(': missing \)"):
        m.remove_by_regex("x/(", 1.0)


def test_batches_fail_item_by_item(make_master: MakeMaster) -> None:
    m = base(make_master)
    res = m.batch_put_start([("b1", 10), ("x/1", 10), ("", 10), ("b2", 20)], "c1", 1.0)
    assert isinstance(res[0], tuple) and isinstance(res[3], tuple)
    assert [r.code for r in res[1:3] if isinstance(r, StoreError)] == [
        ErrorCode.OBJECT_ALREADY_EXISTS,
        ErrorCode.INVALID_KEY,
    ]
    ends = m.batch_put_end(["b1", "b2", "zz"], 1.0)
    assert ends[:2] == [None, None] and isinstance(ends[2], NotFoundError)
    assert m.batch_exist(["b1", "zz", "x/2"], 1.0) == [True, False, True]
    gets = m.batch_get_replica_list(["b2", "zz"], 1.0)
    assert isinstance(gets[0], GetResult) and gets[0].size == 20
    assert isinstance(gets[1], NotFoundError)
    rm = m.batch_remove(["b2", "b1"], 2.0)
    assert isinstance(rm[0], ConflictError) and rm[1] is None  # b2 is leased
    m.batch_put_start([("r1", 10)], "c1", 2.0)
    assert m.batch_put_revoke(["r1", "r1"], 2.0)[1].code == ErrorCode.OBJECT_NOT_FOUND  # type: ignore[union-attr]
    ups = m.batch_upsert_start([("x/2", 5)], "c1", 3.0)
    assert isinstance(ups[0], tuple)


def test_a_batch_places_exactly_as_the_same_puts_one_by_one(make_master: MakeMaster) -> None:
    """The batch builds its placement context once; the outcome is still that of each
    put in turn: the same replicas, errors, evictions and events (seeded strategy)."""
    items = [("n1", 600), ("n2", 600), ("big", 5000), ("x/2", 10), ("n3", 700), ("n4", 900)]
    one, many = base(make_master), base(make_master)
    expected: list[object] = []
    for key, size in items:
        try:
            expected.append(one.put_start(key, size, "c1", 1.0))
        except StoreError as exc:
            expected.append((exc.code, exc.message))
    got = [
        (r.code, r.message) if isinstance(r, StoreError) else r
        for r in many.batch_put_start(items, "c1", 1.0)
    ]
    assert got == expected
    codes = [r[0] if isinstance(r[0], ErrorCode) else "placed" for r in got]  # type: ignore[index]
    assert codes == [
        "placed",
        "placed",
        ErrorCode.STORE_FULL,  # larger than any segment: nothing evicted for it
        ErrorCode.OBJECT_ALREADY_EXISTS,
        ErrorCode.STORE_FULL,  # after evicting everything evictable
        ErrorCode.STORE_FULL,
    ]
    events = many.take_events()
    assert events == one.take_events()
    assert [e.key for e in events if isinstance(e, ObjectRemoved)] == ["x/2", "y/1", "x/1"]
    assert fingerprint(many) == fingerprint(one)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "cfg", [None, ReplicateConfig(replica_num=2), ReplicateConfig(soft_pin=True)]
)
def test_a_batch_of_mixed_items_matches_the_puts_one_by_one(
    make_master: MakeMaster, seed: int, cfg: ReplicateConfig | None
) -> None:
    """Every kind of item a batch may carry (fine ones, duplicates, keys present, keys
    too long, empty, non-ASCII, not strings, bad sizes, sizes of several slices, more
    than fits) gets the result, the placement and the events that putting the items
    one by one gives, across segments a seeded random strategy chooses from, one of
    them suspect."""
    import random

    rng = random.Random(seed)
    segs = [("a", "c1", 30_000), ("b", "c2", 30_000), ("c", "c3", 20_000), ("d", "c4", 25_000)]
    kinds: list[Callable[[int], tuple[object, object]]] = [
        lambda i: (f"k{i}", rng.choice([1, 640, 3000, 4096])),
        lambda i: ("k0", 10),  # a duplicate of the first
        lambda i: ("x/1", 10),  # present
        lambda i: ("k" * 17, 10),  # longer than max_key_length
        lambda i: ("", 10),
        lambda i: (f"ключ{i}", 50),  # UTF-8, not ASCII: 2 bytes per letter
        lambda i: ("ключ" * 3, 5),  # 24 bytes: too long once encoded
        lambda i: (f"s{i}\udc80", 5),  # no UTF-8 form
        lambda i: (7, 10),
        lambda i: (f"z{i}", 0),
        lambda i: (f"n{i}", -4),
        lambda i: (f"t{i}", True),
        lambda i: (f"m{i}", 9000),  # three slices of max_slice_size 4096
        lambda i: (f"h{i}", 29_000),  # evicts, or fails
    ]
    items = [(f"k{i}", 1000) for i in range(3)]
    items += [rng.choice(kinds)(i) for i in range(3, 60)]  # type: ignore[misc]

    def build() -> MasterState:
        m = make_master(segs, seed=seed, max_key_length=16, max_slice_size=4096)
        for k in ("x/1", "x/2"):
            m.put_start(k, 100, "c1", 0.0)
            m.put_end(k, 0.0)
        m.put_start("w", 10, "c1", 0.5, avoid=["b"])  # b is suspect from now on
        m.take_events()
        return m

    one, many = build(), build()
    expected: list[object] = []
    for key, size in items:
        try:
            expected.append(one.put_start(key, size, "c9", 1.0, cfg))  # type: ignore[arg-type]
        except StoreError as exc:
            expected.append((exc.code, exc.message))
    got = [
        (r.code, r.message) if isinstance(r, StoreError) else r
        for r in many.batch_put_start(items, "c9", 1.0, cfg)  # type: ignore[arg-type]
    ]
    assert got == expected
    assert many.take_events() == one.take_events()
    assert fingerprint(many) == fingerprint(one)
    for name in ("a", "b", "c", "d"):
        free = [m.segments.get(name).allocator.free_list() for m in (many, one)]
        assert free[0] == free[1]


def test_list_keys_pages_in_key_order(make_master: MakeMaster) -> None:
    m = make_master([("a", "c1", 100_000)])
    for k in ["p/3", "p/1", "q/1", "p/2", "o", "p/10", "p"]:
        m.put_start(k, 1, "c1", 0.0)
    m.put_end("p/1", 0.0)
    page = m.list_keys("p/", limit=2)
    assert page.entries == (
        KeyEntry("p/1", 1, ObjectState.COMPLETE),
        KeyEntry("p/10", 1, ObjectState.PROCESSING),
    )
    assert page.next_start_after == "p/10"
    page = m.list_keys("p/", start_after="p/10", limit=2)
    assert [e.key for e in page.entries] == ["p/2", "p/3"]
    assert page.next_start_after is None
    assert [e.key for e in m.list_keys(start_after="p/3").entries] == ["q/1"]
    assert [e.key for e in m.list_keys("p", start_after="a").entries][:2] == ["p", "p/1"]


def test_remove_by_regex_and_prefix(make_master: MakeMaster) -> None:
    m = base(make_master)
    assert m.remove_by_regex(r"/1$", 1.0).removed == 2
    assert [e.key for e in m.list_keys().entries] == ["x/2"]
    assert m.remove_by_prefix("x/", 1.0).removed == 1
    assert m.snapshot().removed_objects_total == 3


def test_event_stream_of_a_lifecycle(make_master: MakeMaster) -> None:
    m = make_master([("a", "c1", 1000)])
    reps = m.put_start("k", 10, "c1", 1.0)
    m.put_end("k", 2.0)
    m.pin("k", 3.0, hard=True)
    m.remove("k", 4.0)
    from mooncake_core.store import ObjectPinned, ObjectUnpinned

    assert m.take_events() == [
        ObjectStored(2.0, "k", 10, reps),
        ObjectPinned(3.0, "k", False, True, None),
        ObjectUnpinned(4.0, "k", False, expired=False),
        ObjectRemoved(4.0, "k", RemoveReason.REMOVED, True),
    ]
    assert m.take_events() == []


def test_snapshot_counts(make_master: MakeMaster) -> None:
    m = base(make_master)
    m.put_start("w", 10, "c1", 1.0, ReplicateConfig(replica_num=2))
    s = m.snapshot()
    assert (s.key_count, s.complete_count, s.processing_count) == (4, 3, 1)
    assert (s.allocated_bytes, s.total_capacity_bytes, s.client_count) == (320, 2000, 2)
    assert [(g.name, g.used, g.keys) for g in s.segments] == [("a", 310, 4), ("b", 10, 1)]
    assert s.usage == 0.16
