"""Chained XXH3-64 block keys against vectors computed here with xxhash directly."""

from __future__ import annotations

import struct

import pytest
import xxhash

from mooncake_core.conductor import (
    BlockHasher,
    block_store_key,
    keys_from_trace,
    parse_block_store_key,
)
from mooncake_core.config.models import HashingConfig


def _reference(tokens: list[int], block_size: int, seed: int) -> list[int]:
    """Independent spelling of the RFC #1527 chain."""
    out: list[int] = []
    for i in range(len(tokens) // block_size):
        block = tokens[i * block_size : (i + 1) * block_size]
        raw = b"".join(struct.pack("<I", t) for t in block)
        local = xxhash.xxh3_64(raw, seed=seed).intdigest()
        if i == 0:
            out.append(local)
        else:
            out.append(
                xxhash.xxh3_64(
                    struct.pack("<Q", out[-1]) + struct.pack("<Q", local), seed=seed
                ).intdigest()
            )
    return out


@pytest.mark.parametrize(
    ("tokens", "block_size", "seed"),
    [
        (list(range(1, 10)), 4, 0),
        ([0, 2**32 - 1, 42, 7, 7, 7], 2, 7),
        ([5] * 48, 16, 2**64 - 1),
    ],
)
def test_hash_chain_matches_reference(tokens: list[int], block_size: int, seed: int) -> None:
    hasher = BlockHasher(HashingConfig(block_size=block_size, seed=seed))
    assert hasher.block_keys(tokens) == _reference(tokens, block_size, seed)


def test_hash_chain_pinned_vector() -> None:
    hasher = BlockHasher(HashingConfig(block_size=4, seed=0))
    assert hasher.block_keys([1, 2, 3, 4, 5, 6, 7, 8, 9]) == [
        0x6FC1EBD4F4D6EA31,
        0x3A14937FD5340C7A,
    ]


def test_partial_tail_is_not_hashed_and_prefixes_share_keys() -> None:
    hasher = BlockHasher(HashingConfig(block_size=4))
    a = hasher.block_keys([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9])
    b = hasher.block_keys([1, 2, 3, 4, 5, 6, 7, 8])
    c = hasher.block_keys([1, 2, 3, 4, 0, 6, 7, 8])
    assert a == b
    assert c[0] == a[0] and c[1] != a[1]
    assert hasher.block_keys([1, 2, 3]) == []


def test_same_block_in_different_position_gets_different_key() -> None:
    hasher = BlockHasher(HashingConfig(block_size=2))
    keys = hasher.block_keys([9, 9, 9, 9])
    assert keys[0] == hasher.local_hash([9, 9])
    assert keys[1] == hasher.chain(keys[0], hasher.local_hash([9, 9]))
    assert keys[0] != keys[1]


def test_seed_changes_keys() -> None:
    a = BlockHasher(HashingConfig(block_size=2, seed=0)).block_keys([1, 2])
    b = BlockHasher(HashingConfig(block_size=2, seed=1)).block_keys([1, 2])
    assert a != b


@pytest.mark.parametrize("bad", [-1, 2**32])
def test_out_of_range_token_rejected(bad: int) -> None:
    hasher = BlockHasher(HashingConfig(block_size=2))
    with pytest.raises(ValueError, match=str(bad)):
        hasher.block_keys([1, bad])
    with pytest.raises(ValueError, match=str(bad)):
        hasher.local_hash([bad])


def test_trace_adapter_keeps_complete_blocks() -> None:
    # 6955 tokens = 13 full 512-token blocks + a partial one.
    ids = list(range(46, 60))
    assert keys_from_trace(ids, 6955) == tuple(range(46, 59))
    assert keys_from_trace(ids, 6955, complete_only=False) == tuple(range(46, 60))
    assert keys_from_trace([1, 2], 1024) == (1, 2)


def test_trace_adapter_rejects_inconsistent_records() -> None:
    with pytest.raises(ValueError, match="3 hash_ids for 1024 tokens"):
        keys_from_trace([1, 2, 3], 1024)
    with pytest.raises(ValueError, match="negative"):
        keys_from_trace([1, -2], 1024)


def test_store_key_format() -> None:
    assert (
        block_store_key("mooncake-tiny", 0x6FC1EBD4F4D6EA31) == "kv/mooncake-tiny/6fc1ebd4f4d6ea31"
    )
    assert block_store_key("m", 1) == "kv/m/0000000000000001"
    with pytest.raises(ValueError):
        block_store_key("a/b", 1)
    with pytest.raises(ValueError):
        block_store_key("m", 2**64)


def test_numpy_tokens_hash_like_lists() -> None:
    import numpy as np

    hasher = BlockHasher(HashingConfig(block_size=4, seed=3))
    tokens = [7, 2**32 - 1, 0, 5, 9, 9, 9, 9]
    assert hasher.block_keys(np.array(tokens, dtype=np.int64)) == hasher.block_keys(tokens)
    assert hasher.block_keys(np.array(tokens, dtype=np.uint32)) == _reference(tokens, 4, 3)
    with pytest.raises(ValueError, match="-3"):
        hasher.block_keys(np.array([1, 2, 3, -3]))


def test_store_key_parses_back() -> None:
    key = block_store_key("mooncake-tiny", 2**64 - 1)
    assert parse_block_store_key(key) == ("mooncake-tiny", 2**64 - 1)
    for other in (
        "kv/m/123",
        "kv//0000000000000001",
        "pin/m/0000000000000001",
        "kv/m/000000000000000G",
        "kv/m/00000000000000AB",
        "kv/a/b/0000000000000001",
    ):
        assert parse_block_store_key(other) is None
