"""DRAM over SSD on one store node: what the node does with its tiers.

This is the node-side half of the SSD tier (see ``docs/durability.md``, "SSD tier"): a
byte-limited LRU of objects in DRAM whose victims are offloaded to an :class:`SsdTier`,
reads that fall through to disk, and promotion back to DRAM after repeated hits.

Policies (:data:`OffloadPolicy`):

- ``on_evict``: an object is written to disk when DRAM evicts it (nothing is written
  while it is hot);
- ``write_through_pinned``: as ``on_evict``, and pinned objects are also written to disk
  at put time, so they survive even a node restart.

Pinned objects are never evicted from DRAM (like hard pins at the master).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from .ssd import SsdTier

OffloadPolicy = Literal["on_evict", "write_through_pinned"]


@dataclass(frozen=True, slots=True)
class TierStats:
    """Where reads were served from."""

    dram_bytes: int
    dram_objects: int
    dram_hits: int
    ssd_hits: int
    misses: int
    offloaded: int
    promoted: int


class TieredCache:
    """Objects in DRAM up to ``dram_capacity`` bytes, the rest on the SSD tier.

    Args:
        dram_capacity: bytes of object data DRAM may hold.
        ssd: the disk tier.
        policy: when objects are written to disk.
    """

    def __init__(
        self, dram_capacity: int, ssd: SsdTier, policy: OffloadPolicy = "on_evict"
    ) -> None:
        if dram_capacity <= 0:
            raise ValueError(f"dram_capacity must be positive, got {dram_capacity}")
        self.capacity = dram_capacity
        self.ssd = ssd
        self.policy = policy
        self._dram: OrderedDict[str, bytes] = OrderedDict()
        self._pinned: set[str] = set()
        self._used = 0
        self._lock = threading.Lock()
        self._dram_hits = self._ssd_hits = self._misses = 0
        self._offloaded = self._promoted = 0

    def put(self, key: str, data: bytes, *, pinned: bool = False) -> None:
        """Store ``data`` in DRAM (offloading LRU victims to disk to make room).

        Raises:
            ValueError: the object is larger than DRAM.
        """
        if len(data) > self.capacity:
            raise ValueError(f"object {key!r} ({len(data)} bytes) exceeds DRAM ({self.capacity})")
        with self._lock:
            self._drop(key)
            self.ssd.remove(key)  # an older value on disk must never be served
            if pinned:
                self._pinned.add(key)
                if self.policy == "write_through_pinned":
                    self.ssd.put(key, data)
            self._insert(key, data)

    def get(self, key: str) -> bytes | None:
        """The object from DRAM, else from disk (promoted after repeated hits)."""
        with self._lock:
            data = self._dram.get(key)
            if data is not None:
                self._dram.move_to_end(key)
                self._dram_hits += 1
                return data
        read = self.ssd.get(key)
        with self._lock:
            if read is None:
                self._misses += 1
                return None
            self._ssd_hits += 1
            if read.promote and key not in self._dram and len(read.data) <= self.capacity:
                self._insert(key, read.data)
                self._promoted += 1
            return read.data

    def remove(self, key: str) -> None:
        """Forget ``key`` in both tiers."""
        with self._lock:
            self._drop(key)
            self._pinned.discard(key)
            self.ssd.remove(key)

    def in_dram(self, key: str) -> bool:
        """Whether ``key`` is resident in DRAM."""
        with self._lock:
            return key in self._dram

    def stats(self) -> TierStats:
        """Counters."""
        with self._lock:
            return TierStats(
                self._used,
                len(self._dram),
                self._dram_hits,
                self._ssd_hits,
                self._misses,
                self._offloaded,
                self._promoted,
            )

    def _insert(self, key: str, data: bytes) -> None:
        self._dram[key] = data
        self._used += len(data)
        victims = (k for k in list(self._dram) if k not in self._pinned and k != key)
        while self._used > self.capacity:
            victim = next(victims, None)
            if victim is None:
                break  # everything left is pinned: DRAM stays over (as the master's hard pins)
            value = self._dram.pop(victim)
            self._used -= len(value)
            if not self.ssd.contains(victim):
                self.ssd.put(victim, value)
            self._offloaded += 1

    def _drop(self, key: str) -> None:
        old = self._dram.pop(key, None)
        if old is not None:
            self._used -= len(old)
