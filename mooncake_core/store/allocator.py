"""Offset allocator for one segment: best-fit over a free list with coalescing.

The master never touches segment memory; it only hands out ``(offset, length)`` ranges
inside ``[0, capacity)``. Free space is kept twice, both sorted:

    _starts  [0, 4096, 9000, ...]            free block starts, for neighbour lookup
    _by_size [(512, 9000), (4096, 0), ...]   (length, start), for best-fit lookup

Allocation is a bisect in ``_by_size`` (smallest block that fits; ties go to the lowest
offset, so results are deterministic). Free finds the neighbours with a bisect in
``_starts`` and merges with them. Both are O(log n) searches plus a list insert/delete
(a memmove of pointers, fast for the few thousand free blocks a segment has).

Allocated ranges are not tracked (the object metadata already holds them); a free is
checked against the free list instead, which catches double frees and overlaps.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from .errors import ErrorCode, InvalidArgumentError


class OffsetAllocator:
    """Best-fit range allocator over ``[0, capacity)``.

    Args:
        capacity: bytes managed.
        alignment: every allocation is rounded up to a multiple of this (a power of two).

    Raises:
        InvalidArgumentError: capacity not positive or alignment not a power of two.
    """

    __slots__ = ("_by_size", "_len_at", "_starts", "alignment", "capacity", "used")

    def __init__(self, capacity: int, alignment: int = 1) -> None:
        if capacity <= 0:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"capacity must be positive, got {capacity}"
            )
        if alignment <= 0 or alignment & (alignment - 1):
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"alignment must be a power of two, got {alignment}"
            )
        self.capacity = capacity
        self.alignment = alignment
        self.used = 0
        self._starts: list[int] = [0]
        self._len_at: dict[int, int] = {0: capacity}
        self._by_size: list[tuple[int, int]] = [(capacity, 0)]

    def rounded(self, size: int) -> int:
        """Return ``size`` rounded up to the alignment (what an allocation really takes)."""
        a = self.alignment
        return (size + a - 1) // a * a

    @property
    def free(self) -> int:
        """Free bytes (possibly fragmented)."""
        return self.capacity - self.used

    @property
    def largest_free(self) -> int:
        """Size of the largest free block: the biggest allocation that can succeed."""
        return self._by_size[-1][0] if self._by_size else 0

    @property
    def free_blocks(self) -> int:
        """Number of free blocks (1 when unfragmented)."""
        return len(self._starts)

    def fits(self, size: int) -> bool:
        """Whether an allocation of ``size`` bytes would succeed now."""
        return 0 < self.rounded(size) <= self.largest_free

    def allocate(self, size: int) -> int | None:
        """Allocate ``size`` bytes (rounded up to the alignment).

        Args:
            size: bytes wanted, positive.

        Returns:
            The offset, or ``None`` when no free block is large enough.

        Raises:
            InvalidArgumentError: size not positive.
        """
        if size <= 0:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"allocation size must be positive, got {size}"
            )
        need = self.rounded(size)
        i = bisect_left(self._by_size, (need, -1))
        if i == len(self._by_size):
            return None
        length, start = self._by_size.pop(i)
        j = bisect_left(self._starts, start)
        rest = length - need
        if rest:
            # Keep the tail free; the block keeps its slot in _starts, moved to the tail.
            self._starts[j] = start + need
            del self._len_at[start]
            self._len_at[start + need] = rest
            insort(self._by_size, (rest, start + need))
        else:
            del self._starts[j]
            del self._len_at[start]
        self.used += need
        return start

    def release(self, offset: int, size: int) -> None:
        """Return a range given by :meth:`allocate` (same ``size`` as requested).

        Raises:
            InvalidArgumentError: the range is outside the segment, misaligned, or
                overlaps free space (a double free); nothing is changed then.
        """
        need = self.rounded(size)
        end = offset + need
        if size <= 0 or offset < 0 or end > self.capacity or offset % self.alignment:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"release of [{offset}, {offset + size}) is outside or misaligned in a "
                f"segment of {self.capacity} bytes",
            )
        j = bisect_right(self._starts, offset)
        prev = self._starts[j - 1] if j > 0 else None
        nxt = self._starts[j] if j < len(self._starts) else None
        if (prev is not None and prev + self._len_at[prev] > offset) or (
            nxt is not None and nxt < end
        ):
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"release of [{offset}, {end}) overlaps free space (double free?)",
            )
        start, length = offset, need
        if nxt is not None and nxt == end:
            nlen = self._len_at.pop(nxt)
            self._remove_size(nlen, nxt)
            del self._starts[j]
            length += nlen
        if prev is not None and prev + self._len_at[prev] == offset:
            plen = self._len_at[prev]
            self._remove_size(plen, prev)
            start, length = prev, plen + length
            self._len_at[prev] = length
        else:
            self._starts.insert(j, start)
            self._len_at[start] = length
        insort(self._by_size, (length, start))
        self.used -= need

    def allocate_at(self, offset: int, size: int) -> bool:
        """Allocate exactly ``[offset, offset + rounded(size))`` if all of it is free.

        For putting an object back at the range its bytes occupy (undoing a change the
        journal refused); the normal path is :meth:`allocate`.

        Returns:
            False (nothing changed) when part of the range is taken or outside.
        """
        need = self.rounded(size)
        if size <= 0 or offset < 0 or offset % self.alignment:
            return False
        j = bisect_right(self._starts, offset) - 1
        if j < 0:
            return False
        start = self._starts[j]
        length = self._len_at[start]
        if offset + need > start + length:
            return False
        self._remove_size(length, start)
        del self._starts[j]
        del self._len_at[start]
        for s, n in ((start, offset - start), (offset + need, start + length - offset - need)):
            if n:
                insort(self._starts, s)
                self._len_at[s] = n
                insort(self._by_size, (n, s))
        self.used += need
        return True

    def _remove_size(self, length: int, start: int) -> None:
        i = bisect_left(self._by_size, (length, start))
        del self._by_size[i]

    def free_list(self) -> list[tuple[int, int]]:
        """The free blocks as ``(offset, length)`` in offset order (for tests and debugging)."""
        return [(s, self._len_at[s]) for s in self._starts]
