"""Chained block hashes: the keys that name KV blocks in the index, the store and the workers.

Scheme (Mooncake RFC #1527), every integer little-endian::

    tokens:  | t0 .. t(B-1) | tB .. t(2B-1) | ... | partial tail (not hashed) |
    local_i = XXH3_64(u32 tokens of block i, seed)
    seq_0   = local_0
    seq_i   = XXH3_64(u64 seq_(i-1) || u64 local_i, seed)

``seq_i`` depends on every token before the end of block ``i``, so equal keys mean
equal prefixes and a longest-prefix match over keys is a longest-prefix match over
tokens. Only complete blocks are hashed: a partial tail block is never cached.

The public traces ship ``hash_ids`` that are already chained (512-token blocks);
:func:`keys_from_trace` uses them as keys directly.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Sequence

import numpy as np
import xxhash

from mooncake_core.config.models import HashingConfig

__all__ = [
    "TRACE_BLOCK_SIZE",
    "BlockHasher",
    "Tokens",
    "block_store_key",
    "keys_from_trace",
    "parse_block_store_key",
]

TRACE_BLOCK_SIZE = 512
"""Tokens per block in the public Mooncake traces."""

_U32_MAX = 2**32 - 1
_PAIR = struct.Struct("<QQ")
_U32_CODE = "I" if array.array("I").itemsize == 4 else "L"

Tokens = Sequence[int] | np.ndarray
"""Token ids: a sequence of ints or a numpy integer array."""


def _u32_le(tokens: Tokens) -> bytes:
    """Tokens as packed u32 little-endian, validating the range.

    ``array`` converts a list about 3x faster than numpy and rejects out-of-range ids itself.
    """
    if isinstance(tokens, np.ndarray):
        if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) > _U32_MAX):
            bad = next(int(t) for t in tokens.ravel() if t < 0 or t > _U32_MAX)
            raise ValueError(f"token id {bad} does not fit in an unsigned 32-bit integer")
        return tokens.astype("<u4").tobytes()
    try:
        arr = array.array(_U32_CODE, tokens)
    except OverflowError:
        bad = next(t for t in tokens if not 0 <= t <= _U32_MAX)
        raise ValueError(f"token id {bad} does not fit in an unsigned 32-bit integer") from None
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tobytes()


class BlockHasher:
    """Computes chained XXH3-64 block keys for token sequences.

    Args:
        config: block size and seed; must be the same in every component.
    """

    def __init__(self, config: HashingConfig | None = None) -> None:
        cfg = config or HashingConfig()
        self.block_size: int = cfg.block_size
        self.seed: int = cfg.seed

    def local_hash(self, block_tokens: Tokens) -> int:
        """Hash one block's tokens on their own (``local_i``).

        Args:
            block_tokens: token ids, each in ``[0, 2**32)``.

        Returns:
            The unsigned 64-bit XXH3 of the tokens as u32 little-endian.

        Raises:
            ValueError: a token id is negative or does not fit in 32 bits.
        """
        return xxhash.xxh3_64_intdigest(_u32_le(block_tokens), seed=self.seed)

    def chain(self, prev: int, local: int) -> int:
        """Combine the previous block's key with this block's local hash (``seq_i``)."""
        return xxhash.xxh3_64_intdigest(_PAIR.pack(prev, local), seed=self.seed)

    def block_keys(self, tokens: Tokens) -> list[int]:
        """Return the chained key of every complete block of ``tokens``.

        Args:
            tokens: the prompt's token ids, each in ``[0, 2**32)``.

        Returns:
            One key per complete block (``len(tokens) // block_size`` keys); the
            partial tail is not hashed.

        Raises:
            ValueError: a token id is out of the u32 range.
        """
        bs = self.block_size
        n = len(tokens) // bs
        if n == 0:
            return []
        raw = memoryview(_u32_le(tokens[: n * bs]))
        width = bs * 4
        seed = self.seed
        keys: list[int] = []
        prev = 0
        for i in range(n):
            local = xxhash.xxh3_64_intdigest(raw[i * width : (i + 1) * width], seed=seed)
            prev = local if i == 0 else xxhash.xxh3_64_intdigest(_PAIR.pack(prev, local), seed=seed)
            keys.append(prev)
        return keys


def keys_from_trace(
    hash_ids: Sequence[int],
    input_length: int,
    *,
    block_size: int = TRACE_BLOCK_SIZE,
    complete_only: bool = True,
) -> tuple[int, ...]:
    """Use a trace record's ``hash_ids`` as block keys.

    The traces' ids are already chained (equal ids mean equal prefixes), so they are
    keys as they are. The traces also give an id to the partial last block; with
    ``complete_only`` (the default, same rule as :class:`BlockHasher`) it is dropped.

    Args:
        hash_ids: the record's ``hash_ids``.
        input_length: the record's ``input_length`` in tokens.
        block_size: tokens per block of the trace (512 for the public traces).
        complete_only: keep only ids of blocks fully covered by the input.

    Returns:
        The keys, as a tuple.

    Raises:
        ValueError: a negative id or length, or more ids than the input has blocks.
    """
    if input_length < 0:
        raise ValueError(f"input_length must be >= 0, got {input_length}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    most = -(-input_length // block_size)
    if len(hash_ids) > most:
        raise ValueError(
            f"{len(hash_ids)} hash_ids for {input_length} tokens of {block_size}-token blocks "
            f"(at most {most})"
        )
    for h in hash_ids:
        if h < 0:
            raise ValueError(f"hash id {h} is negative")
    keep = min(len(hash_ids), input_length // block_size) if complete_only else len(hash_ids)
    return tuple(int(h) for h in hash_ids[:keep])


def block_store_key(model: str, key: int) -> str:
    """Return the store object key of a block: ``kv/<model>/<16 lowercase hex digits>``.

    Args:
        model: the served model's name (blocks of different models never alias).
        key: the block's chained key, an unsigned 64-bit integer.

    Raises:
        ValueError: an empty model name, one with ``/``, or a key outside u64.
    """
    if not model or "/" in model:
        raise ValueError(f"model name {model!r} must be non-empty and contain no '/'")
    if not 0 <= key < 2**64:
        raise ValueError(f"block key {key} is not an unsigned 64-bit integer")
    return f"kv/{model}/{key:016x}"


def parse_block_store_key(key: str) -> tuple[str, int] | None:
    """Inverse of :func:`block_store_key`: ``(model, block key)``, or ``None`` for other keys.

    Store events name objects by key; this tells which ones are KV blocks (to feed the
    prefix index) and which are something else (``None``, not an error).
    """
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "kv" or not parts[1] or len(parts[2]) != 16:
        return None
    digits = parts[2]
    if digits.lower() != digits:
        return None
    try:
        return parts[1], int(digits, 16)
    except ValueError:
        return None
