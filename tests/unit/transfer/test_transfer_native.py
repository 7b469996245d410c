"""The C extension's copy helpers and segment table."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from mooncake_core.transfer._c import native
from mooncake_core.transfer.protocol import COPY_JOB


def _addr(buf) -> int:
    return native.buffer_address(buf)[0]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_copy_many_splits_exactly(threads):
    rng = np.random.default_rng(1)
    src = rng.integers(0, 256, size=3 * 1024 * 1024 + 123, dtype=np.uint8)
    dst = np.zeros_like(src)
    sizes = [1, 4095, 70_000, 1 << 20, (1 << 20) + 5]  # sums below len(src)
    jobs, off = [], 0
    for n in sizes:
        jobs.append(COPY_JOB.pack(_addr(dst) + off, _addr(src) + off, n))
        off += n
    total = native.copy_many(b"".join(jobs), threads, 0)
    assert total == off
    assert np.array_equal(dst[:off], src[:off])
    assert not dst[off:].any()


def test_copy_many_rejects_bad_buffers():
    with pytest.raises(ValueError, match="bad job buffer"):
        native.copy_many(b"\x00" * 5, 1, 0)
    with pytest.raises(ValueError, match="threads"):
        native.copy_many(b"", 0, 0)


def test_buffer_address():
    b = bytearray(16)
    m = mmap.mmap(-1, 4096)
    addr, n, ro = native.buffer_address(b)
    assert n == 16 and not ro and addr
    assert native.buffer_address(b"x")[2] is True
    assert native.buffer_address(m)[1] == 4096
    with pytest.raises(ValueError, match="contiguous"):
        native.buffer_address(np.zeros((4, 4))[:, 1])
    m.close()


def test_segtable_add_remove():
    t = native.SegTable()
    buf = bytearray(64)
    t.add(1, _addr(buf), 64)
    with pytest.raises(ValueError, match="already registered"):
        t.add(1, _addr(buf), 64)
    with pytest.raises(ValueError, match="NULL"):
        t.add(2, 0, 64)
    assert t.remove(1) is True
    assert t.remove(1) is False


def test_bounded_copy():
    dst, src = bytearray(8), b"abcdefgh"
    native.copy(dst, 2, src, 0, 4)
    assert bytes(dst) == b"\0\0abcd\0\0"
    with pytest.raises(ValueError, match="out of bounds"):
        native.copy(dst, 6, src, 0, 4)


@pytest.mark.parametrize("shift", [1, 8, 16, 31, 32, 4080])
@pytest.mark.parametrize("threads", [1, 2])
def test_copy_many_exact_when_the_destination_sits_just_past_the_source(shift, threads):
    # Destinations 1-31 bytes past their source (modulo 4 KiB) are copied backwards to
    # dodge 4K aliasing: every length, tail and split must still land byte-exact, and
    # nothing around the destination may change.
    rng = np.random.default_rng(shift)
    src = mmap.mmap(-1, 1 << 21)
    src[:] = rng.integers(0, 256, size=1 << 21, dtype=np.uint8).tobytes()
    dst = mmap.mmap(-1, (1 << 21) + 8192)
    base = _addr(dst) + shift
    sizes = [1024, 1025, 4095, 4096, 4097, 65_537, 300_001, 1 << 20]
    jobs, off = [], 0
    for n in sizes:
        jobs.append(COPY_JOB.pack(base + off, _addr(src) + off, n))
        off += n
    assert native.copy_many(b"".join(jobs), threads, 0) == off
    assert dst[shift : shift + off] == src[:off]
    assert not any(dst[:shift]) and not any(dst[shift + off : shift + off + 4096])
    out = bytearray(70_000 + 64)
    native.copy(out, 16, src, 0, 70_000)  # the single copy takes the same path
    assert bytes(out[16 : 16 + 70_000]) == src[:70_000] and not any(out[:16])


@pytest.mark.parametrize("shift", [0, 3, 16])
def test_copy_many_exact_for_streamed_large_copies(shift):
    # 8 MiB and more are copied with streaming stores, backwards, from an unaligned
    # head and tail: byte-exact, split or not, and nothing outside the range written.
    n = (8 << 20) + 77
    src = mmap.mmap(-1, n + 4096)
    src[:] = np.random.default_rng(7).integers(0, 256, size=n + 4096, dtype=np.uint8).tobytes()
    for threads in (1, 2):
        dst = mmap.mmap(-1, n + 8192)
        job = COPY_JOB.pack(_addr(dst) + 4096 + shift, _addr(src) + 5, n)
        assert native.copy_many(job, threads, 0) == n
        assert dst[4096 + shift : 4096 + shift + n] == src[5 : 5 + n]
        assert not any(dst[: 4096 + shift]) and not any(dst[4096 + shift + n :])


@pytest.mark.parametrize("threads", [1, 2])
def test_copy_many_streams_small_pieces_when_asked_and_stays_exact(threads):
    # A put's copies into a segment stream from stream_min bytes (4 KiB for the store
    # client): pieces below it, at it and above, unaligned heads and tails, byte-exact
    # and nothing between or around the pieces written.
    rng = np.random.default_rng(11)
    src = mmap.mmap(-1, 1 << 21)
    src[:] = rng.integers(0, 256, size=1 << 21, dtype=np.uint8).tobytes()
    dst = mmap.mmap(-1, (1 << 21) + (1 << 16))
    sizes = [100, 4095, 4096, 4097, 65_536 + 3, 300_001, 1 << 20]
    jobs, spans, src_off, dst_off = [], [], 0, 7
    for n in sizes:
        jobs.append(COPY_JOB.pack(_addr(dst) + dst_off, _addr(src) + src_off, n))
        spans.append((dst_off, src_off, n))
        src_off += n
        dst_off += n + 64  # a gap that must stay zero
    assert native.copy_many(b"".join(jobs), threads, 0, 4096) == src_off
    for d, s, n in spans:
        assert dst[d : d + n] == src[s : s + n]
        assert not any(dst[d + n : d + n + 64])
    assert not any(dst[:7])


def test_copy_many_refuses_a_negative_stream_min():
    with pytest.raises(ValueError, match="stream_min=-1"):
        native.copy_many(b"", 1, 0, -1)


@pytest.mark.parametrize("n", [0, 1, 4095, (4 << 20) + 13, (9 << 20) + 1])
def test_bytes_of_copies_exactly_what_it_is_asked_for(n):
    # A staged read's bytes: from an offset, of any length; from 4 MiB the new object's
    # pages are asked for as huge pages first (a hint that changes no byte).
    src = mmap.mmap(-1, n + 8192)
    src[:] = np.random.default_rng(n).integers(0, 256, size=n + 8192, dtype=np.uint8).tobytes()
    got = native.bytes_of(memoryview(src), 4099, n)
    assert type(got) is bytes and got == src[4099 : 4099 + n]


def test_bytes_of_refuses_a_range_outside_its_source():
    src = bytearray(100)
    for off, n in ((0, 101), (1, 100), (-1, 5), (0, -1), (101, 0)):
        with pytest.raises(ValueError, match="bytes_of out of bounds"):
            native.bytes_of(src, off, n)
