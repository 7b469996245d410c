"""Block cache with least-recently-used eviction: a prefill instance's DRAM or the store pool."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["BlockLRU"]


class BlockLRU:
    """Holds up to ``capacity_blocks`` block keys; the least recently used goes first.

    Args:
        capacity_blocks: most blocks held; ``None`` means unlimited.

    Raises:
        ValueError: a negative capacity.
    """

    __slots__ = ("_keys", "capacity_blocks", "evictions", "inserted")

    def __init__(self, capacity_blocks: int | None) -> None:
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError(f"cache capacity must be >= 0 blocks, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self._keys: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0
        self.inserted = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: int) -> bool:
        return key in self._keys

    def prefix_len(self, keys: Sequence[int]) -> int:
        """How many leading ``keys`` are held (no recency update)."""
        held = self._keys
        n = 0
        for k in keys:
            if k not in held:
                break
            n += 1
        return n

    def touch(self, keys: Sequence[int]) -> None:
        """Mark held ``keys`` as just used (absent ones are ignored)."""
        held = self._keys
        for k in keys:
            if k in held:
                held.move_to_end(k)

    def insert(self, keys: Sequence[int]) -> tuple[list[int], list[int]]:
        """Add ``keys`` (or refresh them), evicting the least recently used beyond capacity.

        Keys of one call are inserted in order, so a prompt's later blocks are more recent
        than its earlier ones and a prefix is evicted from its tail first... unless it is
        touched again, which the simulator does on every reuse.

        Returns:
            ``(added, evicted)``: keys newly held and keys dropped. A key added and then
            evicted by the same call (capacity smaller than the prompt) is in neither.
        """
        cap = self.capacity_blocks
        held = self._keys
        added: list[int] = []
        evicted: list[int] = []
        if cap == 0:
            return added, evicted
        for k in keys:
            if k in held:
                held.move_to_end(k)
                continue
            held[k] = None
            added.append(k)
        self.inserted += len(added)
        if cap is not None and len(held) > cap:
            fresh = set(added)
            while len(held) > cap:
                k, _ = held.popitem(last=False)
                if k in fresh:
                    fresh.discard(k)
                else:
                    evicted.append(k)
            if len(fresh) != len(added):
                added = [k for k in added if k in fresh]
            self.evictions += len(evicted)
        return added, evicted

    def keys(self) -> list[int]:
        """Held keys, least recently used first."""
        return list(self._keys)
