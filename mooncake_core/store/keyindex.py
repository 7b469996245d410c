"""Sorted key index: prefix scans and paginated listing without sorting on every call.

A list of sorted chunks (at most ``_CHUNK`` keys each) plus the last key of each chunk.
Insert and delete are a bisect over the chunk maxima, a bisect inside one chunk and a
list insert of at most ``_CHUNK`` pointers: O(log n + chunk), instead of the O(n)
memmove a single sorted list of 10M keys would need.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

_CHUNK = 1024


class SortedKeys:
    """A sorted set of strings with ordered iteration from any point."""

    __slots__ = ("_chunks", "_len", "_maxes")

    def __init__(self) -> None:
        self._chunks: list[list[str]] = []
        self._maxes: list[str] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, key: str) -> None:
        """Insert ``key`` (it must not be present; the caller keeps the set semantics)."""
        if not self._chunks:
            self._chunks.append([key])
            self._maxes.append(key)
            self._len = 1
            return
        i = bisect_left(self._maxes, key)
        if i == len(self._chunks):
            i -= 1
            self._chunks[i].append(key)
            self._maxes[i] = key
        else:
            insort(self._chunks[i], key)
        self._len += 1
        chunk = self._chunks[i]
        if len(chunk) > 2 * _CHUNK:
            half = len(chunk) // 2
            self._chunks[i : i + 1] = [chunk[:half], chunk[half:]]
            self._maxes[i : i + 1] = [chunk[half - 1], chunk[-1]]

    def discard(self, key: str) -> None:
        """Remove ``key`` if present."""
        i = bisect_left(self._maxes, key)
        if i == len(self._chunks):
            return
        chunk = self._chunks[i]
        j = bisect_left(chunk, key)
        if j == len(chunk) or chunk[j] != key:
            return
        del chunk[j]
        self._len -= 1
        if not chunk:
            del self._chunks[i]
            del self._maxes[i]
        elif j == len(chunk):
            self._maxes[i] = chunk[-1]

    def iter_from(self, start: str = "", *, exclusive: bool = False) -> Iterator[str]:
        """Yield keys in order, from the first key >= ``start`` (> when ``exclusive``).

        Do not add or discard keys while iterating; collect them first.
        """
        find = bisect_right if exclusive else bisect_left
        i = find(self._maxes, start)
        first = True
        while i < len(self._chunks):
            chunk = self._chunks[i]
            j = find(chunk, start) if first else 0
            first = False
            # Slicing copies the chunk; still, callers collect keys before mutating.
            yield from chunk[j:]
            i += 1

    def iter_prefix(self, prefix: str) -> Iterator[str]:
        """Yield the keys starting with ``prefix``, in order."""
        for key in self.iter_from(prefix):
            if not key.startswith(prefix):
                return
            yield key
