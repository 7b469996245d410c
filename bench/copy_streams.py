"""A put's copies into a segment: memcpy against streaming stores (``copy_many``).

Usage: ``python bench/copy_streams.py [--segment-mib 1024] [--rounds 3]``

The store client copies a put's pieces into a node's segment, mapped populated from its
/dev/shm file, with one ``copy_many`` call per batch: 64 pieces, two threads, the
destination moving on through the segment as a put's fresh ranges do, the source one
caller buffer (``ctypes``, as the benchmarks' callers allocate it). This copies so with
``stream_min`` 0 (the default: only copies of 8 MiB and more stream) and 4096 (what the
client passes for writes), alternating per round, and prints the median GB/s (1e9
bytes/s) of each per piece size.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import struct
import tempfile
import time

from mooncake_core.transfer._c import native

PIECES = 64
SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)


def run(seg: mmap.mmap, base: int, piece: int, stream_min: int) -> float:
    """GB/s of one pass of batches through the whole segment."""
    batch = PIECES * piece
    src = ctypes.create_string_buffer(batch)
    ctypes.memset(src, 7, batch)
    s = ctypes.addressof(src)
    took, moved, pos = 0.0, 0, 0
    while pos + batch <= len(seg):
        jobs = struct.pack(
            f"<{3 * PIECES}Q",
            *(v for i in range(PIECES) for v in (base + pos + i * piece, s + i * piece, piece)),
        )
        t0 = time.perf_counter()
        native.copy_many(jobs, 2, 4 << 20, stream_min)
        took += time.perf_counter() - t0
        moved += batch
        pos += batch
    return moved / took / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    size = args.segment_mib << 20
    fd, path = tempfile.mkstemp(prefix="copy-streams-", dir="/dev/shm")
    try:
        os.ftruncate(fd, size)
        seg = mmap.mmap(fd, size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        base = ctypes.addressof(ctypes.c_char.from_buffer(seg))
        print("| piece | memcpy GB/s | streamed GB/s | streamed / memcpy |")
        print("|---|---|---|---|")
        for piece in SIZES:
            got: dict[int, list[float]] = {0: [], 4096: []}
            for r in range(args.rounds):
                for sm in (0, 4096) if r % 2 == 0 else (4096, 0):
                    got[sm].append(run(seg, base, piece, sm))
            a, b = statistics.median(got[0]), statistics.median(got[4096])
            print(f"| {piece >> 10} KiB | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
