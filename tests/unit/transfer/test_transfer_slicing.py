"""Slicing and striping plans."""

from __future__ import annotations

import itertools

import pytest

from mooncake_core.transfer.slicing import SlicePlan, pair_paths, plan

MiB = 1 << 20


def test_small_request_is_one_slice_on_the_cursor_path():
    assert plan(100, MiB, 3, cursor=2) == [SlicePlan(0, 100, 2)]
    assert plan(0, MiB, 3) == []


def test_even_cut_round_robin():
    assert plan(10, 4, 3, cursor=1) == [SlicePlan(0, 4, 1), SlicePlan(4, 3, 2), SlicePlan(7, 3, 0)]
    slices = plan(4 * MiB, MiB, 2)
    assert [(s.offset, s.length, s.path) for s in slices] == [
        (0, MiB, 0),
        (MiB, MiB, 1),
        (2 * MiB, MiB, 0),
        (3 * MiB, MiB, 1),
    ]


def test_large_request_uses_every_path_even_below_n_slices():
    slices = plan(3 * MiB, MiB, 8)
    assert len(slices) == 8
    assert {s.path for s in slices} == set(range(8))
    assert sum(s.length for s in slices) == 3 * MiB
    # Contiguous, no gap or overlap.
    assert all(a.offset + a.length == b.offset for a, b in itertools.pairwise(slices))


def test_not_cut_below_a_page():
    assert len(plan(8192, 4096, 3)) == 2


def test_pair_paths_covers_every_nic():
    assert pair_paths(["a"], ["x", "y", "z"]) == [("a", "x"), ("a", "y"), ("a", "z")]
    assert pair_paths(["a", "b", "c"], ["x", "y"]) == [("a", "x"), ("b", "y"), ("c", "x")]
    with pytest.raises(ValueError, match="both sides"):
        pair_paths([], ["x"])


def test_bad_input():
    with pytest.raises(ValueError, match="length=-1"):
        plan(-1, 4, 1)
    with pytest.raises(ValueError, match="n_paths=0"):
        plan(1, 4, 0)


def test_min_slices_cuts_a_lone_request_for_every_connection():
    assert plan(MiB, MiB, 1, min_slices=2) == [
        SlicePlan(0, MiB // 2, 0),
        SlicePlan(MiB // 2, MiB // 2, 0),
    ]
    assert len(plan(4 * MiB, MiB, 1, min_slices=2)) == 4  # already enough slices
    assert len(plan(8192, MiB, 1, min_slices=3)) == 2  # never under a page
    assert plan(100, MiB, 1, min_slices=2) == [SlicePlan(0, 100, 0)]
