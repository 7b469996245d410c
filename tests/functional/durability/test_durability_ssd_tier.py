"""SSD tier on a real directory: a working set larger than DRAM reads back exactly."""

from __future__ import annotations

import os
import random
from pathlib import Path

from mooncake_core.store.tier.ssd import SsdTier, SsdTierOptions
from mooncake_core.store.tier.stack import TieredCache


def test_working_set_larger_than_dram_reads_back_exactly(tmp_path: Path) -> None:
    rng = random.Random(7)
    objects = {f"blk/{i:04d}": os.urandom(rng.randint(1, 64) << 10) for i in range(300)}
    total = sum(map(len, objects.values()))
    ssd = SsdTier(SsdTierOptions(tmp_path / "ssd", 4 * total, promote_after=2))
    cache = TieredCache(total // 8, ssd)  # DRAM holds an eighth of the working set
    for k, v in objects.items():
        cache.put(k, v)
    order = list(objects)
    for _ in range(2):
        rng.shuffle(order)
        for k in order:
            assert cache.get(k) == objects[k], k
    s = cache.stats()
    assert s.ssd_hits > len(objects) and s.misses == 0 and s.promoted > 0
    assert s.dram_bytes <= total // 8

    # Damage one offloaded file: a miss and a counter, never the wrong bytes.
    victim = next(k for k in order if not cache.in_dram(k) and ssd.contains(k))
    path = ssd.path_of(victim)
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x55
    path.write_bytes(bytes(blob))
    assert cache.get(victim) is None
    assert ssd.snapshot().corrupt == 1

    # A node restart finds the remaining files.
    again = SsdTier(SsdTierOptions(tmp_path / "ssd", 4 * total))
    on_disk = [k for k in objects if again.contains(k)]
    assert on_disk and victim not in on_disk
    for k in on_disk:
        got = again.get(k)
        assert got is not None and got.data == objects[k]
