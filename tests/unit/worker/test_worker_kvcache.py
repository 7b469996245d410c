"""PagedKVCache: layout and bytes, block tables, LRU prefix cache, events, failures."""

from __future__ import annotations

import pytest
import torch

from mooncake_core.conductor.events import BlockRemoved, BlockStored, Tier
from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker import CacheFullError, PagedKVCache


def _cache(cfg: ModelConfig, hc: HashingConfig, n: int = 4, **kw: object) -> PagedKVCache:
    return PagedKVCache(cfg, hc, n, location="p0", **kw)  # type: ignore[arg-type]


def _kv(cfg: ModelConfig, n: int, base: float) -> torch.Tensor:
    d = cfg.hidden // cfg.heads
    return base + torch.arange(cfg.kv_heads * n * d, dtype=torch.float32).view(
        1, cfg.kv_heads, n, d
    )


def test_block_bytes_layout(tiny: ModelConfig, hashing: HashingConfig) -> None:
    c = _cache(tiny, hashing)
    d = tiny.hidden // tiny.heads
    assert c.layer_nbytes == 2 * tiny.kv_heads * 4 * d * 4
    assert c.block_nbytes == tiny.layers * c.layer_nbytes
    assert c.pool_view().numel() == 4 * c.block_nbytes
    # Views, not copies: block b starts at b * block_nbytes of the one pool buffer.
    assert c.block_view(2).data_ptr() == c.pool.data_ptr() + 2 * c.block_nbytes
    c.create_sequence("s")
    c.reserve("s", 6)  # blocks 0 and 1
    k, v = _kv(tiny, 6, 0.0), _kv(tiny, 6, 1000.0)
    c.write(["s"], 1, [0], k, v)
    # Layer 1 of block 1 = K then V of tokens 4..5, each [kv_heads, block_size, d].
    raw = c.layer_view(1, 1).view(torch.float32).view(2, tiny.kv_heads, 4, d)
    assert torch.equal(raw[0, :, :2], k[0, :, 4:6])
    assert torch.equal(raw[1, :, :2], v[0, :, 4:6])
    gk, gv = c.gather(["s"], 1, 6)
    assert torch.equal(gk, k) and torch.equal(gv, v)


def test_block_round_trip_through_bytes(tiny: ModelConfig, hashing: HashingConfig) -> None:
    a, b = _cache(tiny, hashing), _cache(tiny, hashing)
    a.create_sequence("s")
    a.reserve("s", 4)
    a.write(["s"], 0, [0], _kv(tiny, 4, 3.0), _kv(tiny, 4, 7.0))
    data = a.read_block(a.block_table("s")[0])
    assert len(data) == a.block_nbytes
    b.import_sequence("t", 4, [data])
    assert b.length("t") == 4
    assert b.read_block(b.block_table("t")[0]) == data
    with pytest.raises(ValueError, match="bytes"):
        b.write_block(0, data[:-1])


def test_prefix_reuse_and_lru_eviction_order(tiny: ModelConfig, hashing: HashingConfig) -> None:
    c = _cache(tiny, hashing, n=4)
    c.create_sequence("a")
    c.reserve("a", 8)
    c.commit("a", 8, [11, 12])
    c.create_sequence("b")
    c.reserve("b", 8)
    c.commit("b", 8, [21, 22])
    assert c.take_events() == [
        BlockStored("p0", Tier.HBM, (11, 12)),
        BlockStored("p0", Tier.HBM, (21, 22)),
    ]
    c.free("a")
    c.free("b")
    assert c.match([11, 12, 13]) == 2
    # Reusing "a"'s first block touches it: "a"'s second block becomes the oldest.
    assert c.create_sequence("c", [11, 99], use_blocks=2) == 4
    c.free("c")
    c.create_sequence("d")
    c.reserve("d", 12)  # three fresh blocks: evicts 12, then 21, then 22
    assert c.take_events() == [
        BlockRemoved("p0", Tier.HBM, (12,)),
        BlockRemoved("p0", Tier.HBM, (21,)),
        BlockRemoved("p0", Tier.HBM, (22,)),
    ]
    assert c.match([11]) == 1
    snap = c.snapshot()
    assert (snap.used_blocks, snap.cached_blocks, snap.free_blocks, snap.evictions) == (3, 1, 0, 3)
    assert (snap.hit_blocks, snap.queried_blocks) == (1, 2)


def test_blocks_in_use_are_never_evicted_and_full_raises_cleanly(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    c = _cache(tiny, hashing, n=3)
    c.create_sequence("a")
    c.reserve("a", 8)
    c.commit("a", 8, [1, 2])
    c.create_sequence("b")
    before = c.snapshot()
    with pytest.raises(CacheFullError, match="need 2 blocks, 1 free and 0 evictable"):
        c.reserve("b", 8)
    assert c.snapshot() == before
    assert c.block_table("b") == ()
    c.reserve("b", 4)
    assert len(c.block_table("b")) == 1


def test_commit_deduplicates_equal_prefixes(tiny: ModelConfig, hashing: HashingConfig) -> None:
    c = _cache(tiny, hashing, n=4)
    for sid in ("a", "b"):
        c.create_sequence(sid)
        c.reserve(sid, 4)
        c.commit(sid, 4, [5])
    assert c.take_events() == [BlockStored("p0", Tier.HBM, (5,))]
    c.free("a")
    c.free("b")
    snap = c.snapshot()
    # "b" computed the same block privately: it goes back to the free list, not the cache.
    assert (snap.cached_blocks, snap.free_blocks) == (1, 3)


def test_import_block_caches_and_validates(tiny: ModelConfig, hashing: HashingConfig) -> None:
    c = _cache(tiny, hashing, n=2)
    data = bytes(range(256)) * (c.block_nbytes // 256)
    blk = c.import_block(77, data)
    assert c.import_block(77, data) == blk
    assert c.read_block(blk) == data
    assert c.take_events() == [BlockStored("p0", Tier.HBM, (77,))]
    before = c.snapshot()
    with pytest.raises(ValueError, match=f"a block is {c.block_nbytes} bytes, got 3"):
        c.import_block(78, b"abc")
    assert c.snapshot() == before and c.match([78]) == 0


def test_bad_arguments(tiny: ModelConfig, hashing: HashingConfig) -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        _cache(tiny, hashing, n=0)
    c = _cache(tiny, hashing, layers=range(1, 2))
    with pytest.raises(ValueError, match="layer 0 is not held"):
        c.layer_view(0, 0)
    with pytest.raises(KeyError, match="nope"):
        c.free("nope")
    c.create_sequence("s")
    with pytest.raises(ValueError, match="already exists"):
        c.create_sequence("s")
    with pytest.raises(ValueError, match="not reserved"):
        c.write(["s"], 1, [0], _kv(tiny, 1, 0.0), _kv(tiny, 1, 0.0))
    with pytest.raises(ValueError, match="exceeds"):
        c.commit("s", 1, [])
    with pytest.raises(ValueError, match="need 1 blocks, got 0"):
        c.import_sequence("t", 3, [])


def test_zero_copy_import_caches_only_arrived_blocks(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    c = _cache(tiny, hashing, n=3)
    c.import_block(1, bytes(c.block_nbytes))
    c.take_events()
    taken = c.begin_import([1, 2, 3, 2])
    assert sorted(taken) == [2, 3]
    assert c.snapshot().used_blocks == 2  # held by the import: not evictable
    with pytest.raises(CacheFullError):
        c.begin_import([4, 5, 6])
    c.block_view(taken[2]).fill_(7)  # the transport writes in place
    c.end_import(taken, ok=[2])
    assert c.take_events() == [BlockStored("p0", Tier.HBM, (2,))]
    assert c.match([1, 2, 3]) == 2
    assert c.read_block(c.lookup(2) or 0) == bytes([7]) * c.block_nbytes
    snap = c.snapshot()
    assert (snap.used_blocks, snap.cached_blocks, snap.free_blocks) == (0, 2, 1)
