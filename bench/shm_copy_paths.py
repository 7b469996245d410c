"""Same-host copy paths into a peer's /dev/shm segment: speed against resident memory.

Usage: ``python bench/shm_copy_paths.py [--segment-mib 1024] [--repeats 3]``

Our shm transport maps a peer's whole segment file once, populated (``MAP_POPULATE``),
and copies with memcpy. Issue 18 asks for a client RSS no larger than upstream's plus
the bytes the client holds; a populated mapping of a 4 GiB segment puts 4 GiB in the
client's RSS (shared pages, counted once touched). This measures the alternatives that
keep the peer's pages out of the client's RSS, side by side in one run:

- ``mapped``: today's path, one populated mapping of the whole segment, memcpy.
- ``window``: map only the copied range (populated) per copy, memcpy, unmap.
- ``syscall``: ``pwrite``/``preadv`` on the segment file, no mapping at all.
- ``dropped``: the one mapping kept, each copy's range faulted in with one
  ``madvise(MADV_POPULATE_WRITE/READ)`` before the copy and its pages dropped from this
  process (``MADV_DONTNEED``; the data stays in the shared file) after it: what keeping
  only a budget of the peer's pages resident costs once the working set exceeds it.

Prints GB/s (1e9 bytes/s, best of ``--repeats``) for writes and reads per block size,
and the VmRSS each path leaves in this process after touching the segment once.
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time
from collections.abc import Callable

BLOCKS = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
_POPULATE_READ, _POPULATE_WRITE = 22, 23  # Linux 5.14+; not in every Python's mmap module


def vm_rss_mib() -> float:
    """This process's resident set, in MiB (from /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def best_rate(op: Callable[[int], None], blk: int, count: int, span: int, repeats: int) -> float:
    """Best bytes/s over ``repeats`` passes of ``count`` copies of ``blk`` bytes."""
    step = max(blk, mmap.ALLOCATIONGRANULARITY)
    offsets = [(i * step) % (span - blk + 1) for i in range(count)]
    offsets = [o - o % mmap.ALLOCATIONGRANULARITY for o in offsets]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for off in offsets:
            op(off)
        best = min(best, time.perf_counter() - t)
    return count * blk / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    size = args.segment_mib << 20
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="mc-bench-")
    try:
        os.ftruncate(fd, size)
        src = bytearray(os.urandom(1 << 20)) * (max(BLOCKS) >> 20)
        mv = memoryview(src)
        populate = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        rw = mmap.PROT_READ | mmap.PROT_WRITE

        rss0 = vm_rss_mib()
        seg = mmap.mmap(fd, size, populate, rw)
        rss_mapped = vm_rss_mib() - rss0
        segmv = memoryview(seg)

        def dropped(off: int, blk: int, write: bool) -> None:
            seg.madvise(_POPULATE_WRITE if write else _POPULATE_READ, off, blk)
            if write:
                segmv[off : off + blk] = mv[:blk]
            else:
                mv[:blk] = segmv[off : off + blk]
            seg.madvise(mmap.MADV_DONTNEED, off, blk)

        def window(off: int, blk: int, write: bool) -> None:
            w = mmap.mmap(fd, blk, populate, rw, offset=off)
            if write:
                w[:] = mv[:blk]
            else:
                mv[:blk] = w
            w.close()

        print(f"segment {args.segment_mib} MiB in /dev/shm; GB/s, best of {args.repeats}")
        print(
            "| block | mapped write | window write | syscall write | dropped write "
            "| mapped read | window read | syscall read | dropped read |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for blk in BLOCKS:
            count = max(4, min(4000, (size // 2) // blk))
            ops: dict[str, Callable[[int], None]] = {
                "mw": lambda o, b=blk: segmv.__setitem__(slice(o, o + b), mv[:b]),
                "ww": lambda o, b=blk: window(o, b, True),
                "sw": lambda o, b=blk: os.pwrite(fd, mv[:b], o) and None,
                "dw": lambda o, b=blk: dropped(o, b, True),
                "mr": lambda o, b=blk: mv.__setitem__(slice(0, b), segmv[o : o + b]),
                "wr": lambda o, b=blk: window(o, b, False),
                "sr": lambda o, b=blk: os.preadv(fd, [mv[:b]], o) and None,
                "dr": lambda o, b=blk: dropped(o, b, False),
            }
            rates = [best_rate(op, blk, count, size, args.repeats) / 1e9 for op in ops.values()]
            label = f"{blk >> 10} KiB" if blk < 1 << 20 else f"{blk >> 20} MiB"
            print(f"| {label} | " + " | ".join(f"{r:.2f}" for r in rates) + " |")
        segmv.release()
        seg.close()
        print(
            f"\nVmRSS added by the populated mapping: {rss_mapped:.0f} MiB; "
            f"after unmapping it, window, syscall and dropped copies over the whole segment "
            f"leave {vm_rss_mib() - rss0:.0f} MiB"
        )
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
