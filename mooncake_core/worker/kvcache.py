"""Paged KV cache of one worker instance, with a local prefix cache standing in for HBM.

Layout: one contiguous pool tensor, so a transport can register it as one region::

    pool[num_blocks, layers, 2, kv_heads, block_size, head_dim]   (dtype of the model)
         |           |       '- 0 = K (after RoPE), 1 = V
         |           '- the layers this cache holds (all, or a CPP stage's range)
         '- block b occupies bytes [b * block_nbytes, (b + 1) * block_nbytes) of the pool

Inside a block, layer ``l`` occupies ``[l * layer_nbytes, (l + 1) * layer_nbytes)``, K
before V, each ``[kv_heads, block_size, head_dim]`` row-major. So a block's bytes are
exactly what the Store keeps under ``block_store_key(model, key)``, a layer's slice is
what the layer-wise store writes, and a CPP stage owning layers ``[a, b)`` holds the
contiguous byte range ``[a * layer_nbytes, b * layer_nbytes)`` of the same object.

Complete blocks are named by the conductor's chained key
(:class:`~mooncake_core.conductor.hashing.BlockHasher`). A block whose key is registered
stays cached after its sequences end and is evicted least-recently-used first when a
fresh block is needed; partial blocks are private to their sequence and never cached.
Every change to the cached key set is queued as a ``BlockStored``/``BlockRemoved`` event
(tier HBM) for the conductor's index. No threads, no IO.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mooncake_core.conductor.events import BlockRemoved, BlockStored, CacheEvent, Tier
from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker.model import KVPair, torch_dtype

__all__ = ["CacheFullError", "CacheSnapshot", "PagedKVCache"]


class CacheFullError(RuntimeError):
    """No free or evictable block is left for an allocation."""


@dataclass(frozen=True, slots=True)
class CacheSnapshot:
    """Read-model of a :class:`PagedKVCache`.

    Attributes:
        location: the instance name used in cache events.
        num_blocks: pool capacity in blocks.
        block_size: tokens per block.
        block_nbytes: bytes of one block.
        free_blocks: blocks holding nothing.
        cached_blocks: keyed blocks no sequence uses (evictable, the prefix cache).
        used_blocks: blocks referenced by live sequences.
        sequences: live sequences.
        hit_blocks: prefix blocks reused so far.
        queried_blocks: prefix blocks looked up so far.
        evictions: cached blocks evicted so far.
    """

    location: str
    num_blocks: int
    block_size: int
    block_nbytes: int
    free_blocks: int
    cached_blocks: int
    used_blocks: int
    sequences: int
    hit_blocks: int
    queried_blocks: int
    evictions: int


@dataclass(slots=True)
class _Seq:
    blocks: list[int]
    length: int


class PagedKVCache:
    """Block pool, per-sequence block tables and an LRU prefix cache.

    Args:
        model: model sizes (layers, kv heads, head dim, dtype).
        hashing: block size (tokens per block) shared with the conductor and store.
        num_blocks: pool capacity.
        layers: the layers held (default all); a CPP stage holds its range only.
        device: torch device of the pool.
        location: instance name for cache events.

    Raises:
        ValueError: a non-positive capacity or a layer range outside the model.
    """

    def __init__(
        self,
        model: ModelConfig,
        hashing: HashingConfig,
        num_blocks: int,
        *,
        layers: range | None = None,
        device: str | torch.device = "cpu",
        location: str = "worker",
    ) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        held = range(model.layers) if layers is None else layers
        if held.step != 1 or len(held) == 0 or held.start < 0 or held.stop > model.layers:
            raise ValueError(f"layer range {held} is not a non-empty slice of 0..{model.layers}")
        if not location:
            raise ValueError("location must be a non-empty instance name")
        self.layers = held
        self.location = location
        self.block_size = hashing.block_size
        self.num_blocks = num_blocks
        head_dim = model.hidden // model.heads
        self.pool = torch.zeros(
            (num_blocks, len(held), 2, model.kv_heads, self.block_size, head_dim),
            dtype=torch_dtype(model.dtype),
            device=torch.device(device),
        )
        self.layer_nbytes = (
            2 * model.kv_heads * self.block_size * head_dim * self.pool.element_size()
        )
        """Bytes of one layer (K then V) of one block."""
        self.block_nbytes = self.layer_nbytes * len(held)
        """Bytes of one block: what one store object holds."""
        self._free: deque[int] = deque(range(num_blocks))
        self._ref = [0] * num_blocks
        self._key_of: dict[int, int] = {}
        self._block_of: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._seqs: dict[str, _Seq] = {}
        self._events: list[CacheEvent] = []
        self._hits = self._queried = self._evictions = 0

    # ---- prefix cache -------------------------------------------------------------------

    def match(self, keys: Sequence[int]) -> int:
        """Return how many leading ``keys`` are cached here (no side effect)."""
        n = 0
        for k in keys:
            if k not in self._block_of:
                break
            n += 1
        return n

    def cached_keys(self) -> list[int]:
        """Every block key the prefix cache holds, ascending (what ``match`` can find)."""
        return sorted(self._block_of)

    def lookup(self, key: int) -> int | None:
        """Return the block holding ``key``, or None."""
        return self._block_of.get(key)

    def import_block(self, key: int, data: bytes | bytearray | memoryview | torch.Tensor) -> int:
        """Put a block fetched from elsewhere (the Store) into the prefix cache.

        The block is cached but unreferenced (evictable) until a sequence uses it. A key
        already cached is only touched.

        Args:
            key: the block's chained key.
            data: exactly ``block_nbytes`` bytes in the layout of this module.

        Returns:
            The block id holding ``key``.

        Raises:
            ValueError: wrong length; CacheFullError: nothing free or evictable.
        """
        have = self._block_of.get(key)
        if have is not None:
            if have in self._lru:
                self._lru.move_to_end(have)
            return have
        src = self._as_bytes(data)
        block = self._take()
        self.block_view(block).copy_(src)
        self._register(block, key)
        self._lru[block] = None
        self._events.append(BlockStored(self.location, Tier.HBM, (key,)))
        return block

    def begin_import(self, keys: Sequence[int]) -> dict[int, int]:
        """Take blocks for prefix blocks that a transport will write in place (zero copy).

        Keys already cached are skipped. The taken blocks are neither cached nor free
        until :meth:`end_import`; write their bytes through :meth:`block_view` (or the
        pool region at ``block * block_nbytes``) meanwhile.

        Args:
            keys: chained keys to fetch.

        Returns:
            ``{key: block}`` for the keys not cached yet.

        Raises:
            CacheFullError: not enough free or evictable blocks (nothing is taken).
        """
        missing = list(dict.fromkeys(k for k in keys if k not in self._block_of))
        blocks = self._take_many(len(missing))
        for b in blocks:
            self._ref[b] = 1  # held by the import: not evictable, not free
        return dict(zip(missing, blocks, strict=True))

    def end_import(self, taken: dict[int, int], ok: Sequence[int] | None = None) -> None:
        """Finish :meth:`begin_import`: cache the blocks whose transfer succeeded.

        Args:
            taken: the mapping :meth:`begin_import` returned.
            ok: keys whose bytes arrived (default all); the other blocks are freed.
        """
        good = set(taken) if ok is None else set(ok)
        stored: list[int] = []
        for key, b in taken.items():
            self._ref[b] = 0
            if key in good and key not in self._block_of:
                self._register(b, key)
                self._lru[b] = None
                stored.append(key)
            else:
                self._free.append(b)
        if stored:
            self._events.append(BlockStored(self.location, Tier.HBM, tuple(stored)))

    # ---- sequences ----------------------------------------------------------------------

    def create_sequence(self, seq_id: str, keys: Sequence[int] = (), use_blocks: int = 0) -> int:
        """Start a sequence, reusing up to ``use_blocks`` cached leading blocks of ``keys``.

        Args:
            seq_id: a new sequence id.
            keys: the prompt's block keys.
            use_blocks: most prefix blocks to reuse (the caller keeps at least one token
                to compute).

        Returns:
            Reused tokens (a multiple of ``block_size``).

        Raises:
            ValueError: the sequence exists or ``use_blocks`` is negative.
        """
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} already exists")
        if use_blocks < 0:
            raise ValueError(f"use_blocks must be >= 0, got {use_blocks}")
        want = min(use_blocks, len(keys))
        blocks: list[int] = []
        for k in keys[:want]:
            b = self._block_of.get(k)
            if b is None:
                break
            blocks.append(b)
        self._queried += want
        self._hits += len(blocks)
        for b in blocks:
            self._ref[b] += 1
            self._lru.pop(b, None)
        self._seqs[seq_id] = _Seq(blocks, len(blocks) * self.block_size)
        return len(blocks) * self.block_size

    def import_sequence(
        self, seq_id: str, length: int, blocks: Sequence[bytes | memoryview | torch.Tensor]
    ) -> None:
        """Create a sequence from received block bytes (decode side of P/D).

        Args:
            seq_id: a new sequence id.
            length: tokens with KV in the blocks.
            blocks: ``ceil(length / block_size)`` blocks of ``block_nbytes`` bytes.

        Raises:
            ValueError: exists, or a block count/length mismatch; CacheFullError: no room.
        """
        need = -(-length // self.block_size)
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} already exists")
        if len(blocks) != need:
            raise ValueError(f"{length} tokens need {need} blocks, got {len(blocks)}")
        srcs = [self._as_bytes(b) for b in blocks]
        ids = self._take_many(need)
        for b, src in zip(ids, srcs, strict=True):
            self.block_view(b).copy_(src)
            self._ref[b] = 1
        self._seqs[seq_id] = _Seq(ids, length)

    def reserve(self, seq_id: str, total_tokens: int) -> None:
        """Make the block table of ``seq_id`` cover ``total_tokens`` tokens.

        Raises:
            KeyError: unknown sequence; CacheFullError: not enough free or evictable
                blocks (nothing is allocated then).
        """
        seq = self._seq(seq_id)
        need = -(-total_tokens // self.block_size) - len(seq.blocks)
        if need > 0:
            for b in self._take_many(need):
                self._ref[b] = 1
                seq.blocks.append(b)

    def commit(self, seq_id: str, length: int, keys: Sequence[int]) -> None:
        """Record that ``seq_id`` has KV for ``length`` tokens and cache its complete blocks.

        Args:
            seq_id: the sequence.
            length: tokens with KV written.
            keys: chained keys of the sequence's complete blocks (extra keys are ignored).

        Raises:
            KeyError: unknown sequence; ValueError: ``length`` beyond the reserved blocks.
        """
        seq = self._seq(seq_id)
        if length > len(seq.blocks) * self.block_size:
            raise ValueError(
                f"length {length} exceeds the {len(seq.blocks)} blocks reserved for {seq_id!r}"
            )
        seq.length = length
        stored: list[int] = []
        for i in range(min(length // self.block_size, len(keys))):
            b, k = seq.blocks[i], keys[i]
            if b in self._key_of or k in self._block_of:
                continue  # already cached, or another block holds the same prefix
            self._register(b, k)
            stored.append(k)
        if stored:
            self._events.append(BlockStored(self.location, Tier.HBM, tuple(stored)))

    def free(self, seq_id: str) -> None:
        """End a sequence: keyed blocks become evictable cache, the rest free.

        Raises:
            KeyError: unknown sequence.
        """
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise KeyError(f"unknown sequence {seq_id!r}")
        for b in seq.blocks:
            self._ref[b] -= 1
            if self._ref[b] == 0:
                if b in self._key_of:
                    self._lru[b] = None
                else:
                    self._free.append(b)

    def length(self, seq_id: str) -> int:
        """Tokens with KV of ``seq_id``."""
        return self._seq(seq_id).length

    def block_table(self, seq_id: str) -> tuple[int, ...]:
        """Block ids of ``seq_id`` in token order."""
        return tuple(self._seq(seq_id).blocks)

    # ---- K/V access ---------------------------------------------------------------------

    def write(
        self,
        seq_ids: Sequence[str],
        layer: int,
        starts: Sequence[int],
        k: torch.Tensor,
        v: torch.Tensor,
    ) -> None:
        """Write new K/V of ``B`` sequences into their reserved slots.

        Args:
            seq_ids: the ``B`` sequences.
            layer: model layer index (must be held here).
            starts: position of the first new token of each sequence.
            k: ``[B, kv_heads, n, head_dim]``; ``v`` the same.

        Raises:
            KeyError: unknown sequence; ValueError: a slot outside the reserved blocks.
        """
        li = self._local(layer)
        n = k.shape[2]
        blk: list[int] = []
        off: list[int] = []
        bs = self.block_size
        for sid, s in zip(seq_ids, starts, strict=True):
            table = self._seq(sid).blocks
            if s + n > len(table) * bs:
                raise ValueError(f"slots {s}..{s + n} of {sid!r} are not reserved")
            for p in range(s, s + n):
                blk.append(table[p // bs])
                off.append(p % bs)
        dev = self.pool.device
        bi = torch.tensor(blk, dtype=torch.long, device=dev)
        oi = torch.tensor(off, dtype=torch.long, device=dev)
        kv_h, d = k.shape[1], k.shape[3]
        self.pool[bi, li, 0, :, oi, :] = (
            k.permute(0, 2, 1, 3).reshape(-1, kv_h, d).to(self.pool.dtype)
        )
        self.pool[bi, li, 1, :, oi, :] = (
            v.permute(0, 2, 1, 3).reshape(-1, kv_h, d).to(self.pool.dtype)
        )

    def gather(self, seq_ids: Sequence[str], layer: int, upto: int) -> KVPair:
        """Past K/V of ``B`` sequences, padded to ``upto`` tokens.

        Args:
            seq_ids: the sequences.
            layer: model layer index (must be held here).
            upto: padded length; positions past a sequence's blocks are filled with
                block 0's content and must be masked by the caller.

        Returns:
            ``(k, v)``, each ``[B, kv_heads, upto, head_dim]`` (a copy).
        """
        li = self._local(layer)
        nb = -(-upto // self.block_size)
        rows = []
        for sid in seq_ids:
            t = self._seq(sid).blocks[:nb]
            rows.append(t + [0] * (nb - len(t)))
        idx = torch.tensor(rows, dtype=torch.long, device=self.pool.device)
        g = self.pool[idx, li]  # [B, nb, 2, kvh, bs, d]
        b, _, _, kvh, bs, d = g.shape
        g = g.permute(2, 0, 3, 1, 4, 5).reshape(2, b, kvh, nb * bs, d)[:, :, :, :upto]
        return g[0], g[1]

    # ---- bytes --------------------------------------------------------------------------

    def block_view(self, block: int) -> torch.Tensor:
        """Flat ``uint8`` view (no copy) of one block; on the pool's device."""
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"block {block} is outside the pool of {self.num_blocks}")
        return self.pool[block].view(torch.uint8).reshape(-1)

    def layer_view(self, block: int, layer: int) -> torch.Tensor:
        """Flat ``uint8`` view of one layer (K then V) of one block."""
        li = self._local(layer)
        return self.block_view(block)[li * self.layer_nbytes : (li + 1) * self.layer_nbytes]

    def pool_view(self) -> torch.Tensor:
        """Flat ``uint8`` view of the whole pool (register it once with a transport)."""
        return self.pool.view(torch.uint8).reshape(-1)

    def read_block(self, block: int) -> bytes:
        """Copy one block out as bytes."""
        return self.block_view(block).cpu().numpy().tobytes()

    def write_block(self, block: int, data: bytes | bytearray | memoryview | torch.Tensor) -> None:
        """Overwrite one block with ``block_nbytes`` bytes.

        Raises:
            ValueError: wrong length or block id.
        """
        self.block_view(block).copy_(self._as_bytes(data))

    # ---- events and read-model ----------------------------------------------------------

    def take_events(self) -> list[CacheEvent]:
        """Return and clear the queued cache events (oldest first)."""
        out, self._events = self._events, []
        return out

    def snapshot(self) -> CacheSnapshot:
        """Counts for the read-model."""
        used = sum(1 for r in self._ref if r > 0)
        return CacheSnapshot(
            location=self.location,
            num_blocks=self.num_blocks,
            block_size=self.block_size,
            block_nbytes=self.block_nbytes,
            free_blocks=len(self._free),
            cached_blocks=len(self._lru),
            used_blocks=used,
            sequences=len(self._seqs),
            hit_blocks=self._hits,
            queried_blocks=self._queried,
            evictions=self._evictions,
        )

    # ---- internals ----------------------------------------------------------------------

    def _seq(self, seq_id: str) -> _Seq:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None

    def _local(self, layer: int) -> int:
        if layer not in self.layers:
            raise ValueError(f"layer {layer} is not held by this cache (holds {self.layers})")
        return layer - self.layers.start

    def _as_bytes(self, data: bytes | bytearray | memoryview | torch.Tensor) -> torch.Tensor:
        if isinstance(data, torch.Tensor):
            src = (
                data.reshape(-1).view(torch.uint8)
                if data.dtype != torch.uint8
                else data.reshape(-1)
            )
        else:
            mv = memoryview(data).cast("B")
            if mv.nbytes != self.block_nbytes:
                raise ValueError(f"a block is {self.block_nbytes} bytes, got {mv.nbytes}")
            src = torch.frombuffer(bytearray(mv) if mv.readonly else mv, dtype=torch.uint8)
        if src.numel() != self.block_nbytes:
            raise ValueError(f"a block is {self.block_nbytes} bytes, got {src.numel()}")
        return src

    def _register(self, block: int, key: int) -> None:
        self._key_of[block] = key
        self._block_of[key] = block

    def _take_many(self, n: int) -> list[int]:
        if n > len(self._free) + len(self._lru):
            raise CacheFullError(
                f"{self.location}: need {n} blocks, {len(self._free)} free and "
                f"{len(self._lru)} evictable of {self.num_blocks}"
            )
        return [self._take() for _ in range(n)]

    def _take(self) -> int:
        if self._free:
            return self._free.popleft()
        if not self._lru:
            raise CacheFullError(f"{self.location}: all {self.num_blocks} blocks are in use")
        block, _ = self._lru.popitem(last=False)
        key = self._key_of.pop(block)
        del self._block_of[key]
        self._evictions += 1
        self._events.append(BlockRemoved(self.location, Tier.HBM, (key,)))
        return block
