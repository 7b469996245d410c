"""Latency of one synchronous Transfer Engine request over tcp, and where it goes.

Usage: ``python bench/transfer_latency.py [--block 4096] [--calls 2000] [--profile]
[--slice-size 1048576] [--first]``

A target engine (``mooncake bench transfer --mode target``) runs in a second process on
127.0.0.1; this process reads and writes ``--block`` bytes one request at a time
(``engine.read`` / ``engine.write``: allocate a batch, submit, wait, free) and prints
p50/p90 in microseconds. ``--profile`` adds a cProfile of the reads (internal time),
which shows the cost outside the network round trip; ``--slice-size`` sets the
initiator's ``transfer.slice_size``. ``--first`` times instead the first read of
``--calls`` fresh engines (connections opened by that read included), as a short-lived
client's one get.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import mmap
import pstats
import subprocess
import sys
import time

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import TransferEngine


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p90) of ``samples`` in microseconds."""
    s = sorted(samples)
    return s[len(s) // 2] * 1e6, s[len(s) * 9 // 10] * 1e6


def first_reads(segment: str, block: int, calls: int, slice_size: int) -> None:
    """Print p50/p90 of the first ``block``-byte read of ``calls`` fresh engines."""
    lat = []
    for _ in range(calls):
        eng = TransferEngine(
            TransferConfig(protocol="tcp", slice_size=slice_size), nics=("127.0.0.1",), port=0
        )
        eng.start()
        buf = memoryview(mmap.mmap(-1, 1 << 26, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS))
        region = eng.register_memory(buf, location="cpu:0")
        seg = eng.open_segment(segment)
        t = time.perf_counter()
        eng.read(region, 0, seg, 0, block)
        lat.append(time.perf_counter() - t)
        eng.close()
    p50, p90 = percentiles(lat)
    print(f"first read {block} B of a fresh engine: p50 {p50:.0f} us, p90 {p90:.0f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--slice-size", type=int, default=1 << 20)
    ap.add_argument("--first", action="store_true")
    args = ap.parse_args()
    target = subprocess.Popen(
        [
            *(sys.executable, "-m", "mooncake_cli", "bench", "transfer", "--mode", "target"),
            *("--protocol", "tcp", "--json", "--buffer-size", "64MiB", "--port", "0"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert target.stdout is not None
        segment = json.loads(target.stdout.readline())["segment"]
        if args.first:
            first_reads(segment, args.block, args.calls, args.slice_size)
            return
        eng = TransferEngine(
            TransferConfig(protocol="tcp", slice_size=args.slice_size), nics=("127.0.0.1",), port=0
        )
        eng.start()
        buf = memoryview(mmap.mmap(-1, 1 << 26, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS))
        region = eng.register_memory(buf, location="cpu:0")
        seg = eng.open_segment(segment)
        for _ in range(200):  # connect and warm up
            eng.read(region, 0, seg, 0, args.block)
        for name, op in (("read", eng.read), ("write", eng.write)):
            lat = []
            for _ in range(args.calls):
                t = time.perf_counter()
                op(region, 0, seg, 0, args.block)
                lat.append(time.perf_counter() - t)
            p50, p90 = percentiles(lat)
            print(f"{name} {args.block} B: p50 {p50:.0f} us, p90 {p90:.0f} us")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                eng.read(region, 0, seg, 0, args.block)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        eng.close()
    finally:
        target.terminate()
        target.wait()


if __name__ == "__main__":
    main()
