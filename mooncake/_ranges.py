"""Byte-range helpers of the store adapter: registered-buffer bounds, range reads,
scatter into several buffers, and upstream's ``BufferHandle``."""

from __future__ import annotations

import bisect
import ctypes
import threading
from collections.abc import Callable, Sequence

from ._codes import UpstreamCode

_INVALID = int(UpstreamCode.INVALID_PARAMS)
_OVERFLOW = int(UpstreamCode.BUFFER_OVERFLOW)


class BufferHandle(bytearray):
    """A value returned by ``get_buffer``: buffer protocol, ``size()``, ``ptr()``."""

    def size(self) -> int:
        return len(self)

    def ptr(self) -> int:
        if not self:
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))


class Registry:
    """Buffers registered through the adapter: how many bytes lie after an address."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()

    def add(self, addr: int, size: int) -> None:
        with self._lock:
            if addr not in self._sizes:
                bisect.insort(self._starts, addr)
            self._sizes[addr] = size

    def remove(self, addr: int) -> None:
        with self._lock:
            if self._sizes.pop(addr, None) is not None:
                self._starts.remove(addr)

    def capacity(self, ptr: int) -> int:
        """Registered bytes from ``ptr`` to the end of its buffer (0: not registered)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            if i < 0:
                return 0
            start = self._starts[i]
            return max(0, start + self._sizes[start] - ptr)


def scatter(value: bytes, ptrs: Sequence[int], sizes: Sequence[int]) -> int:
    """Copy ``value`` across the buffers in order; its length, or -600 when the
    buffers are too small or the lists differ in length (nothing written then)."""
    if len(ptrs) != len(sizes) or sum(int(n) for n in sizes) < len(value):
        return _INVALID
    off = 0
    for p, n in zip(ptrs, sizes, strict=True):
        take = min(int(n), len(value) - off)
        if take <= 0:
            break
        ctypes.memmove(int(p), value[off : off + take], take)
        off += take
    return len(value)


def ranged_reads(
    registry: Registry,
    fetch: Callable[[str], bytes | int],
    buffer_ptrs: Sequence[int],
    all_keys: Sequence[Sequence[str]],
    all_dst: Sequence[Sequence[Sequence[int]]],
    all_src: Sequence[Sequence[Sequence[int]]],
    all_sizes: Sequence[Sequence[Sequence[int]]],
) -> list[list[list[int]]]:
    """Upstream's ``get_into_ranges``: results shaped like ``all_dst`` (buffer, key,
    range); a range is its length when copied, else a negative code. Shape mismatches
    leave the affected entries at -600; each key is read once per call."""
    results = [
        [
            [_INVALID] * len(all_dst[i][j]) if i < len(all_dst) and j < len(all_dst[i]) else []
            for j in range(len(all_keys[i]))
        ]
        if i < len(all_keys)
        else []
        for i in range(len(buffer_ptrs))
    ]
    n = len(buffer_ptrs)
    if not n == len(all_keys) == len(all_dst) == len(all_src) == len(all_sizes):
        return results
    cache: dict[str, bytes | int] = {}
    for i, ptr in enumerate(buffer_ptrs):
        cap = registry.capacity(int(ptr))
        keys, dsts, srcs, lens = all_keys[i], all_dst[i], all_src[i], all_sizes[i]
        if cap == 0 or not len(keys) == len(dsts) == len(srcs) == len(lens):
            continue
        for j, key in enumerate(keys):
            dst, src, ln = dsts[j], srcs[j], lens[j]
            if not len(dst) == len(src) == len(ln):
                continue
            if key not in cache:
                cache[key] = fetch(key)
            value = cache[key]
            out = results[i][j]
            for k in range(len(dst)):
                if isinstance(value, int):
                    out[k] = value
                    continue
                d, s, m = int(dst[k]), int(src[k]), int(ln[k])
                if d > cap or m > cap - d or s > len(value) or m > len(value) - s:
                    out[k] = _OVERFLOW if s + m > len(value) else _INVALID
                    continue
                ctypes.memmove(int(ptr) + d, value[s : s + m], m)
                out[k] = m
    return results
