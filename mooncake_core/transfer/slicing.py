"""Slicing and striping plans (sans-IO): cut requests, spread slices over NIC paths.

A *path* is a (local NIC, remote NIC) pair. ``pair_paths`` builds the paths that use
every NIC on both sides; ``plan`` cuts one request into slices of at most
``slice_size`` bytes and deals them round-robin over the paths, starting at a rotating
cursor so that consecutive small requests also land on different NICs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """One slice: bytes ``[offset, offset + length)`` of its request, over ``path``."""

    offset: int
    length: int
    path: int


def pair_paths(local: Sequence[str], remote: Sequence[str]) -> list[tuple[str, str]]:
    """Pair local and remote NICs so that every NIC of both sides is on some path.

    Path ``k`` is ``(local[k % L], remote[k % R])`` for ``k < max(L, R)``.

    Raises:
        ValueError: Either side is empty.
    """
    if not local or not remote:
        raise ValueError(f"need NICs on both sides, got local={list(local)} remote={list(remote)}")
    n = max(len(local), len(remote))
    return [(local[k % len(local)], remote[k % len(remote)]) for k in range(n)]


def plan(
    length: int, slice_size: int, n_paths: int, cursor: int = 0, min_slices: int = 1
) -> list[SlicePlan]:
    """Cut ``length`` bytes into slices and assign paths round-robin from ``cursor``.

    Args:
        length: Request length (0 gives no slices).
        slice_size: Largest slice.
        n_paths: Paths available (>= 1).
        cursor: Path index of the first slice.
        min_slices: Cut into at least this many slices (none under 4 KiB), so that a
            lone request keeps several connections of one path busy at once.

    Returns:
        Slices in offset order.

    Raises:
        ValueError: Negative length, slice_size < 1 or n_paths < 1.
    """
    if length < 0 or slice_size < 1 or n_paths < 1:
        raise ValueError(
            f"bad plan input: length={length} slice_size={slice_size} n_paths={n_paths}"
        )
    count = -(-length // slice_size)
    if count > 1 and count < n_paths:
        # A request bigger than one slice must still use every path: cut it finer.
        count = min(n_paths, -(-length // 4096))
    if count < min_slices:
        count = max(count, min(min_slices, -(-length // 4096)))
    if count == 0:
        return []
    base, extra = divmod(length, count)
    out, off = [], 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(SlicePlan(off, size, (cursor + i) % n_paths))
        off += size
    return out
