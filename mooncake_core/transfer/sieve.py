"""Eviction policies of the endpoint pool: SIEVE (NSDI'24) and FIFO, sans-IO.

Both track keys only; the pool owns the endpoints and closes what they evict.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol


class EvictionPolicy(Protocol):
    """Decides which key leaves a full pool."""

    def access(self, key: Hashable) -> None:
        """Record a hit on a cached key."""

    def insert(self, key: Hashable) -> Hashable | None:
        """Add a new key; return the key evicted to make room, if any."""

    def remove(self, key: Hashable) -> None:
        """Forget a key (its endpoint failed or was closed)."""

    def __len__(self) -> int: ...


class _Node:
    __slots__ = ("key", "newer", "older", "visited")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.visited = False
        self.newer: _Node | None = None
        self.older: _Node | None = None


class Sieve:
    """SIEVE: a FIFO queue plus one "visited" bit and a hand.

    A hit only sets the bit. To evict, the hand walks from where it stopped toward the
    newest entry (wrapping to the oldest), clearing set bits, and evicts the first
    entry whose bit is clear. New keys enter at the head (newest end).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._nodes: dict[Hashable, _Node] = {}
        self._head: _Node | None = None  # newest
        self._tail: _Node | None = None  # oldest
        self._hand: _Node | None = None

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def keys(self) -> list[Hashable]:
        """Keys from oldest to newest."""
        out, node = [], self._tail
        while node is not None:
            out.append(node.key)
            node = node.newer
        return out

    def access(self, key: Hashable) -> None:
        node = self._nodes.get(key)
        if node is not None:
            node.visited = True

    def insert(self, key: Hashable) -> Hashable | None:
        if key in self._nodes:
            self.access(key)
            return None
        evicted = self._evict() if len(self._nodes) >= self.capacity else None
        node = _Node(key)
        node.older = self._head
        if self._head is not None:
            self._head.newer = node
        self._head = node
        if self._tail is None:
            self._tail = node
        self._nodes[key] = node
        return evicted

    def remove(self, key: Hashable) -> None:
        node = self._nodes.pop(key, None)
        if node is None:
            return
        if self._hand is node:
            self._hand = node.newer
        if node.older is not None:
            node.older.newer = node.newer
        else:
            self._tail = node.newer
        if node.newer is not None:
            node.newer.older = node.older
        else:
            self._head = node.older

    def _evict(self) -> Hashable:
        node = self._hand or self._tail
        while node is not None and node.visited:
            node.visited = False
            node = node.newer or self._tail
        if node is None:
            raise RuntimeError("SIEVE eviction from an empty queue")
        # The hand stays where the walk stopped: on the next newer entry.
        self._hand = node.newer
        self.remove(node.key)
        return node.key


class Fifo:
    """Plain FIFO: evict the oldest inserted key; hits change nothing."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._keys: dict[Hashable, None] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> list[Hashable]:
        """Keys from oldest to newest."""
        return list(self._keys)

    def access(self, key: Hashable) -> None:
        return None

    def insert(self, key: Hashable) -> Hashable | None:
        if key in self._keys:
            return None
        evicted = None
        if len(self._keys) >= self.capacity:
            evicted = next(iter(self._keys))
            del self._keys[evicted]
        self._keys[key] = None
        return evicted

    def remove(self, key: Hashable) -> None:
        self._keys.pop(key, None)


EVICTION_POLICIES: dict[str, type[Sieve] | type[Fifo]] = {"sieve": Sieve, "fifo": Fifo}
"""Registry: config ``endpoint_eviction`` name -> policy class."""


def make_policy(name: str, capacity: int) -> Sieve | Fifo:
    """Build the named policy.

    Raises:
        ValueError: Unknown name.
    """
    try:
        cls = EVICTION_POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {name!r}; known: {sorted(EVICTION_POLICIES)}"
        ) from None
    return cls(capacity)
