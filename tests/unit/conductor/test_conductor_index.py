"""Prefix index: per-holder longest-prefix match, events, pending replicas, resync drift."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mooncake_core.conductor import BlockRemoved, BlockStored, PrefixIndex, Tier

HBM, DRAM = Tier.HBM, Tier.DRAM


@pytest.fixture
def index() -> PrefixIndex:
    ix = PrefixIndex()
    ix.apply(BlockStored("p0", HBM, (1, 2, 3)))
    ix.apply(BlockStored("p1", HBM, (1, 2)))
    ix.apply(BlockStored("p2", HBM, (1, 3)))  # holds block 3 but not 2: prefix stops at 1
    ix.apply(BlockStored("store-0", DRAM, (1, 2, 3, 4)))
    return ix


def test_match_per_holder(index: PrefixIndex) -> None:
    m = index.match([1, 2, 3, 4, 5])
    assert m.by_holder == {("p0", HBM): 3, ("p1", HBM): 2, ("p2", HBM): 1, ("store-0", DRAM): 4}
    assert m.best_len == 4
    assert m.holders_with(3) == [("p0", HBM), ("store-0", DRAM)]


def test_match_location_takes_best_tier(index: PrefixIndex) -> None:
    index.apply(BlockStored("p1", DRAM, (1, 2, 3)))
    m = index.match([1, 2, 3])
    assert m.by_location["p1"] == 3
    assert m.by_holder[("p1", HBM)] == 2


def test_match_edge_cases(index: PrefixIndex) -> None:
    assert index.match([]).best_len == 0
    assert index.match([9, 1]).by_holder == {}
    m = index.match([1])
    assert set(m.by_holder.values()) == {1} and len(m.by_holder) == 4


def test_removed_event_and_stale_remove(index: PrefixIndex) -> None:
    index.apply(BlockRemoved("p0", HBM, (2, 99)))
    assert index.match([1, 2, 3]).by_holder[("p0", HBM)] == 1
    snap = index.snapshot()
    assert snap.stale_removes == 1
    assert snap.events_applied == 5


def test_bad_event_changes_nothing(index: PrefixIndex) -> None:
    before = index.snapshot()
    with pytest.raises(TypeError):
        index.apply(("p0", HBM, (1,)))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        BlockStored("p0", HBM, (2**64,))
    with pytest.raises(ValueError):
        index.resync("p0", HBM, [1, -5])
    assert index.snapshot() == before


def test_resync_counts_drift(index: PrefixIndex) -> None:
    # Truth: p0 lost block 3 (missed removal) and gained 7 (missed store).
    assert index.resync("p0", HBM, [1, 2, 7]) == (1, 1)
    assert index.keys_of("p0", HBM) == frozenset({1, 2, 7})
    index.resync("new", HBM, [1])
    snap = index.snapshot()
    assert (snap.resyncs, snap.drift_added, snap.drift_removed) == (2, 2, 1)
    assert index.match([1, 2, 3]).by_holder[("p0", HBM)] == 2


def test_pending_counts_for_match_until_confirmed_or_cancelled(index: PrefixIndex) -> None:
    index.add_pending("p1", HBM, [3, 4])
    assert index.match([1, 2, 3, 4]).by_holder[("p1", HBM)] == 4
    assert index.match([1, 2, 3, 4], include_pending=False).by_holder[("p1", HBM)] == 2
    assert not index.holds("p1", HBM, 3)
    index.confirm("p1", HBM, [3, 4])
    assert index.holds("p1", HBM, 4)
    assert index.snapshot().pending_entries == 0
    index.add_pending("p2", HBM, [2])
    index.add_pending("p2", HBM, [2])
    index.cancel("p2", HBM, [2])
    assert index.match([1, 2]).by_holder[("p2", HBM)] == 2  # one fetch still pending
    index.cancel("p2", HBM, [2])
    assert index.match([1, 2]).by_holder[("p2", HBM)] == 1


def test_drop_location(index: PrefixIndex) -> None:
    assert index.drop_location("store-0") == 4
    assert index.match([1, 2, 3, 4]).best_len == 3


def test_snapshot_sizes(index: PrefixIndex) -> None:
    snap = index.snapshot()
    assert snap.distinct_blocks == 4
    assert snap.entries == 11
    assert snap.per_holder[0] == ("p0", "hbm", 3)


@settings(max_examples=150, deadline=None)
@given(
    holdings=st.dictionaries(
        st.sampled_from(["p0", "p1", "p2", "s0"]),
        st.sets(st.integers(0, 12), max_size=10),
        max_size=4,
    ),
    removed=st.lists(st.tuples(st.sampled_from(["p0", "p1"]), st.integers(0, 12)), max_size=5),
    prompt=st.lists(st.integers(0, 12), max_size=12),
)
def test_match_equals_brute_force(
    holdings: dict[str, set[int]], removed: list[tuple[str, int]], prompt: list[int]
) -> None:
    ix = PrefixIndex()
    truth = {loc: set(keys) for loc, keys in holdings.items()}
    for loc, keys in holdings.items():
        ix.apply(BlockStored(loc, HBM, tuple(sorted(keys))))
    for loc, key in removed:
        ix.apply(BlockRemoved(loc, HBM, (key,)))
        truth.get(loc, set()).discard(key)
    expected = {}
    for loc, keys in truth.items():
        n = 0
        while n < len(prompt) and prompt[n] in keys:
            n += 1
        if n:
            expected[(loc, HBM)] = n
    m = ix.match(prompt)
    assert m.by_holder == expected
    assert m.best_len == max(expected.values(), default=0)
