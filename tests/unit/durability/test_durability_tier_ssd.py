"""SSD tier: file format, checksums, watermark LRU eviction, promotion, restart."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest
import xxhash

from mooncake_core.store.tier.ssd import HEADER_SIZE, MAGIC, SsdTier, SsdTierOptions
from mooncake_core.store.tier.stack import TieredCache


def _tier(tmp_path: Path, capacity: int = 1 << 20, **kw: object) -> SsdTier:
    return SsdTier(SsdTierOptions(tmp_path / "ssd", capacity, **kw))  # type: ignore[arg-type]


def test_file_format_is_header_key_data(tmp_path: Path) -> None:
    t = _tier(tmp_path)
    assert t.put("k1", b"hello")
    blob = t.path_of("k1").read_bytes()
    assert blob[:8] == MAGIC
    assert int.from_bytes(blob[8:12], "little") == 2
    assert int.from_bytes(blob[12:20], "little") == 5
    assert int.from_bytes(blob[20:28], "little") == xxhash.xxh3_64_intdigest(b"hello")
    assert int.from_bytes(blob[28:32], "little") == zlib.crc32(blob[:28])
    assert blob[HEADER_SIZE:] == b"k1hello"
    assert t.path_of("k1").name == f"{xxhash.xxh3_64_intdigest(b'k1'):016x}.obj"


def test_read_back_and_counters(tmp_path: Path) -> None:
    t = _tier(tmp_path)
    t.put("a", b"x" * 1000)
    r = t.get("a")
    assert r is not None and r.data == b"x" * 1000
    assert t.get("nope") is None
    s = t.snapshot()
    assert (s.files, s.used_bytes, s.offloads, s.hits, s.misses, s.corrupt) == (
        1,
        HEADER_SIZE + 1 + 1000,
        1,
        1,
        1,
        0,
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # a data bit
        lambda b: b[:12] + bytes([b[12] ^ 1]) + b[13:],  # the length field (header CRC)
        lambda b: b[:-10],  # truncated
        lambda b: b"",  # empty
    ],
)
def test_corrupt_file_is_a_miss_and_counted_never_wrong_bytes(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    t = _tier(tmp_path)
    t.put("k", bytes(range(256)) * 4)
    p = t.path_of("k")
    p.write_bytes(damage(p.read_bytes()))
    assert t.get("k") is None
    s = t.snapshot()
    assert (s.corrupt, s.misses, s.files, s.used_bytes) == (1, 1, 0, 0)
    assert not p.exists()
    assert t.get("k") is None and t.snapshot().corrupt == 1


def test_another_keys_file_under_the_same_name_is_not_served(tmp_path: Path) -> None:
    t = _tier(tmp_path)
    t.put("a", b"AAAA")
    target = t.path_of("b")
    target.parent.mkdir(exist_ok=True)
    shutil.copy(t.path_of("a"), target)  # as if "b" hashed to a's name
    t2 = _tier(tmp_path)  # rescan indexes the copied file
    assert t2.get("b") is None and t2.snapshot().corrupt == 1
    got = t2.get("a")
    assert got is not None and got.data == b"AAAA"


def test_watermark_evicts_least_recently_used_down_to_low(tmp_path: Path) -> None:
    item = HEADER_SIZE + 2 + 968  # 1000 bytes per file
    t = _tier(tmp_path, capacity=10 * item, high_watermark=0.9, low_watermark=0.5)
    for i in range(9):
        assert t.put(f"k{i}", bytes([i]) * 968)
    assert t.get("k0") is not None  # k0 becomes most recently used
    assert t.put("k9", b"9" * 968)  # 10 files > 9 allowed: evict to <= 5 incl. the new one
    kept = sorted(k for k in (f"k{i}" for i in range(10)) if t.contains(k))
    assert kept == ["k0", "k6", "k7", "k8", "k9"]
    s = t.snapshot()
    assert (s.files, s.used_bytes, s.evictions) == (5, 5 * item, 5)


def test_object_over_the_watermark_is_refused(tmp_path: Path) -> None:
    t = _tier(tmp_path, capacity=1000, high_watermark=0.5, low_watermark=0.5)
    assert not t.put("big", b"x" * 600)
    assert t.snapshot().files == 0


def test_promote_on_the_nth_hit_and_again_after_a_new_offload(tmp_path: Path) -> None:
    t = _tier(tmp_path, promote_after=3)
    t.put("k", b"v")
    flags = [t.get("k").promote for _ in range(4)]  # type: ignore[union-attr]
    assert flags == [False, False, True, False]
    t.put("k", b"v")
    flags = [t.get("k").promote for _ in range(3)]  # type: ignore[union-attr]
    assert flags == [False, False, True]
    assert t.snapshot().promotions == 2


def test_restart_finds_files_and_drops_interrupted_writes(tmp_path: Path) -> None:
    t = _tier(tmp_path)
    t.put("a", b"1")
    t.put("b", b"22")
    stray = t.path_of("a").with_suffix(".tmp123")
    stray.write_bytes(b"half")
    t2 = _tier(tmp_path)
    assert t2.snapshot().files == 2 and t2.snapshot().used_bytes == t.snapshot().used_bytes
    assert t2.get("b").data == b"22"  # type: ignore[union-attr]
    assert not stray.exists()


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="capacity must be positive"):
        SsdTierOptions(tmp_path, 0)
    with pytest.raises(ValueError, match="watermarks"):
        SsdTierOptions(tmp_path, 10, high_watermark=0.5, low_watermark=0.8)


def test_tiered_cache_offloads_victims_and_promotes(tmp_path: Path) -> None:
    cache = TieredCache(3000, _tier(tmp_path, promote_after=2))
    for i in range(5):
        cache.put(f"k{i}", bytes([i]) * 1000)
    assert [cache.in_dram(f"k{i}") for i in range(5)] == [False, False, True, True, True]
    assert cache.ssd.contains("k0") and cache.ssd.contains("k1")
    assert cache.get("k0") == b"\x00" * 1000  # from disk, 1st hit
    assert not cache.in_dram("k0")
    assert cache.get("k0") == b"\x00" * 1000  # 2nd hit: promoted, evicts k2 to disk
    assert cache.in_dram("k0") and not cache.in_dram("k2") and cache.ssd.contains("k2")
    s = cache.stats()
    assert (s.ssd_hits, s.promoted, s.offloaded, s.dram_objects) == (2, 1, 3, 3)


def test_pinned_objects_stay_in_dram_and_write_through(tmp_path: Path) -> None:
    cache = TieredCache(2000, _tier(tmp_path), policy="write_through_pinned")
    cache.put("p", b"P" * 1000, pinned=True)
    assert cache.ssd.contains("p")  # written through at put time
    for i in range(4):
        cache.put(f"k{i}", b"k" * 1000)
    assert cache.in_dram("p")


def test_new_value_never_served_from_an_old_disk_copy(tmp_path: Path) -> None:
    cache = TieredCache(1000, _tier(tmp_path))
    cache.put("k", b"old" * 300)
    cache.put("x", b"x" * 1000)  # k offloaded
    cache.put("k", b"new" * 300)
    cache.put("y", b"y" * 1000)  # k offloaded again, with the new value
    assert cache.get("k") == b"new" * 300
