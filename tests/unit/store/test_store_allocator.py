"""OffsetAllocator: best fit, coalescing, alignment, double-free detection."""

from __future__ import annotations

import itertools
import random

import pytest

from mooncake_core.store import InvalidArgumentError, OffsetAllocator


def test_allocations_are_contiguous_from_zero() -> None:
    a = OffsetAllocator(100)
    assert [a.allocate(10), a.allocate(20), a.allocate(30)] == [0, 10, 30]
    assert a.used == 60
    assert a.free_list() == [(60, 40)]


def test_best_fit_picks_smallest_hole_then_lowest_offset() -> None:
    a = OffsetAllocator(100)
    offs = [a.allocate(10) for _ in range(10)]
    assert offs == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    a.release(10, 10)  # hole of 10 at 10
    a.release(40, 10)
    a.release(50, 10)  # hole of 20 at 40
    a.release(80, 10)  # hole of 10 at 80
    assert a.free_list() == [(10, 10), (40, 20), (80, 10)]
    assert a.allocate(15) == 40  # only the 20-byte hole fits
    assert a.allocate(10) == 10  # two 10-byte holes: lowest offset
    assert a.allocate(10) == 80
    assert a.allocate(5) == 55
    assert a.allocate(1) is None
    assert a.free_list() == []


def test_release_coalesces_both_neighbours() -> None:
    a = OffsetAllocator(30)
    assert [a.allocate(10), a.allocate(10), a.allocate(10)] == [0, 10, 20]
    a.release(0, 10)
    a.release(20, 10)
    assert a.free_list() == [(0, 10), (20, 10)]
    a.release(10, 10)
    assert a.free_list() == [(0, 30)]
    assert a.largest_free == 30 and a.used == 0


def test_alignment_rounds_sizes_up() -> None:
    a = OffsetAllocator(256, alignment=64)
    assert a.allocate(1) == 0
    assert a.allocate(65) == 64
    assert a.used == 192
    assert not a.fits(128)
    assert a.fits(64)
    a.release(64, 65)
    assert a.free_list() == [(64, 192)]


def test_double_free_and_out_of_range_are_refused_without_change() -> None:
    a = OffsetAllocator(100)
    a.allocate(50)
    before = a.free_list()
    with pytest.raises(InvalidArgumentError, match="double free"):
        a.release(50, 10)
    with pytest.raises(InvalidArgumentError, match="outside"):
        a.release(90, 20)
    with pytest.raises(InvalidArgumentError, match="double free"):
        a.release(40, 20)  # overlaps the free block starting at 50
    assert a.free_list() == before and a.used == 50


@pytest.mark.parametrize(("cap", "align"), [(0, 1), (-5, 1), (10, 3)])
def test_bad_construction(cap: int, align: int) -> None:
    with pytest.raises(InvalidArgumentError):
        OffsetAllocator(cap, align)


def test_zero_size_allocation_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match="positive"):
        OffsetAllocator(10).allocate(0)


def test_random_workload_keeps_invariants() -> None:
    rng = random.Random(7)
    a = OffsetAllocator(10_000, alignment=8)
    live: dict[int, int] = {}
    for _ in range(3000):
        if live and rng.random() < 0.45:
            off = rng.choice(sorted(live))
            a.release(off, live.pop(off))
        else:
            size = rng.randint(1, 300)
            off = a.allocate(size)
            if off is not None:
                live[off] = size
        free = a.free_list()
        # free blocks are sorted, disjoint, never adjacent (fully coalesced)
        for (s1, l1), (s2, _) in itertools.pairwise(free):
            assert s1 + l1 < s2
        assert sum(length for _, length in free) == a.capacity - a.used
        assert a.used == sum(a.rounded(s) for s in live.values())
    for off, size in list(live.items()):
        a.release(off, size)
    assert a.free_list() == [(0, 10_000)]
