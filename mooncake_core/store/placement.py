"""Placement: cut an object into slices and put each replica on its own segments.

Rules, for ``replica_num`` replicas of an object cut into slices of at most
``max_slice_size`` bytes (full slices first, then the remainder):

- replicas never share a segment, so losing one segment costs at most one replica;
- a replica's slices may spread over several segments (the strategy decides), but a
  replica takes a new segment only while enough untouched segments remain for the
  replicas still to place;
- all or nothing: if any slice does not fit, everything allocated so far is released;
- suspect segments (their node missed a heartbeat, or a writer could not reach it) are
  left out while at least ``replica_num`` others remain, except the writer's own
  segments (it is alive: it is writing) and the ones it names as preferred.
"""

from __future__ import annotations

from collections.abc import Sequence

from .objects import Replica, Slice
from .segment import Segment
from .strategies import AllocationStrategy, AllocContext


def slice_lengths(size: int, max_slice_size: int) -> list[int]:
    """Lengths of the slices of an object of ``size`` bytes, in object order."""
    full, rest = divmod(size, max_slice_size)
    return [max_slice_size] * full + ([rest] if rest else [])


def place_replicas(
    segments: Sequence[Segment],
    lengths: Sequence[int],
    replica_num: int,
    strategy: AllocationStrategy,
    ctx: AllocContext,
) -> tuple[Replica, ...] | None:
    """Allocate ``replica_num`` replicas of an object with the given slice lengths.

    Args:
        segments: allocatable segments, in name order.
        lengths: slice lengths (from :func:`slice_lengths`).
        replica_num: replicas wanted (the caller checked it is <= len(segments)).
        strategy: ranks candidate segments for each slice.
        ctx: the writer, for the strategy.

    Returns:
        The replicas, or ``None`` when they do not fit (nothing is left allocated then).
    """
    segments = healthy(segments, replica_num, ctx)
    if replica_num == 1 and len(lengths) == 1:
        # The common write (one replica of one slice), as the loop below places it
        # (the same candidates, the same one call of the strategy), without its sets.
        length = lengths[0]
        cands = [s for s in segments if s.allocator.fits(length)]
        if not cands:
            return None
        seg = strategy.choose(cands, length, ctx)
        return ((Slice(seg.name, allocate_in(seg, length), length),),)
    taken: set[str] = set()
    replicas: list[Replica] = []
    done: list[Slice] = []
    for r in range(replica_num):
        still_to_place = replica_num - r - 1
        pool = [s for s in segments if s.name not in taken] if taken else segments
        mine: set[str] = set()
        slices: list[Slice] = []
        for length in lengths:
            may_take_new = len(pool) - len(mine) - 1 >= still_to_place
            cands = [
                s for s in pool if (may_take_new or s.name in mine) and s.allocator.fits(length)
            ]
            if not cands:
                _rollback(segments, done + slices)
                return None
            seg = strategy.choose(cands, length, ctx)
            slices.append(Slice(seg.name, allocate_in(seg, length), length))
            mine.add(seg.name)
        taken |= mine
        done.extend(slices)
        replicas.append(tuple(slices))
    return tuple(replicas)


def allocate_in(seg: Segment, length: int) -> int:
    """Allocate ``length`` bytes in ``seg``, which :meth:`~.allocator.OffsetAllocator.fits`
    said it can hold; its offset."""
    offset = seg.allocator.allocate(length)
    if offset is None:  # fits() said yes; an allocator that disagrees is a bug
        raise RuntimeError(f"segment {seg.name} refused {length} bytes after fits()")
    return offset


def healthy(segments: Sequence[Segment], replica_num: int, ctx: AllocContext) -> Sequence[Segment]:
    """``segments`` less the suspect ones, when at least ``replica_num`` remain.

    A suspect segment hosted by the writer or named in its preferences stays: the writer
    is alive, and a preference it asked for is worth one retry if the node is dead.
    """
    for s in segments:  # a loop, not any(): this runs once per write
        if s.suspect:
            break
    else:
        return segments
    keep = [
        s
        for s in segments
        if not s.suspect or s.client_id == ctx.client_id or s.name in ctx.preferred
    ]
    return keep if len(keep) >= replica_num else segments


def _rollback(segments: Sequence[Segment], slices: list[Slice]) -> None:
    by_name = {s.name: s for s in segments}
    for sl in slices:
        by_name[sl.segment].allocator.release(sl.offset, sl.length)
