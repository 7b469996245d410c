#!/usr/bin/env python3
"""SSD tier read throughput beside DRAM reads, in one run, on this host.

Reads the same objects three ways, interleaved per repeat:

  dram        ``bytes(obj)``: a copy out of DRAM (what a store get costs at best)
  ssd_warm    ``SsdTier.get``: file read + header CRC + XXH3 check, file in page cache
  ssd_cold    the same after ``posix_fadvise(DONTNEED)`` on every file (read from disk)

Prints a markdown table (GB/s, median of repeats, ratio to DRAM) and writes
``results.json`` to ``--out``.

    python bench/ssd_tier_bench.py --objects 64 --size 4MiB --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mooncake_core.store.tier.ssd import SsdTier, SsdTierOptions


def _size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[: -len(u)]) * m)
    return int(text)


def _drop_cache(tier: SsdTier, keys: list[str]) -> None:
    for k in keys:
        fd = os.open(tier.path_of(k), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--objects", type=int, default=64)
    ap.add_argument("--size", default="4MiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="tier directory (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=Path("bench/out/ssd_tier"))
    a = ap.parse_args()
    size = _size(a.size)
    total = a.objects * size
    base = a.dir or Path(tempfile.mkdtemp(prefix="mc-ssd-bench-"))
    tier = SsdTier(SsdTierOptions(base / "tier", 2 * total + (1 << 20)))
    objs = {f"obj/{i:05d}": os.urandom(size) for i in range(a.objects)}
    t0 = time.perf_counter()
    for k, v in objs.items():
        tier.put(k, v)
    write_s = time.perf_counter() - t0
    keys = list(objs)
    results: dict[str, list[float]] = {"dram": [], "ssd_warm": [], "ssd_cold": []}
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for k in keys:
            _ = bytearray(objs[k])  # one copy out of DRAM
        results["dram"].append(total / (time.perf_counter() - t0) / 1e9)
        for k in keys:  # warm the page cache
            tier.get(k)
        t0 = time.perf_counter()
        for k in keys:
            r = tier.get(k)
            assert r is not None and len(r.data) == size
        results["ssd_warm"].append(total / (time.perf_counter() - t0) / 1e9)
        _drop_cache(tier, keys)
        t0 = time.perf_counter()
        for k in keys:
            r = tier.get(k)
            assert r is not None and len(r.data) == size
        results["ssd_cold"].append(total / (time.perf_counter() - t0) / 1e9)
        for k in keys:  # untimed: the bytes are right
            r = tier.get(k)
            assert r is not None and r.data == objs[k]
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"{a.objects} objects x {a.size} ({total / 2**20:.0f} MiB), {a.repeats} repeats")
    print(f"offload (write) {total / write_s / 1e9:.2f} GB/s\n")
    print("| read path | GB/s (median) | vs DRAM |")
    print("|---|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.2f} | {v / med['dram']:.2f}x |")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(
        json.dumps(
            {
                "args": vars(a) | {"dir": str(base), "out": str(a.out)},
                "gbps": results,
                "offload_gbps": total / write_s / 1e9,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
