"""Typed cache events that feed the global prefix index.

Workers emit them for their instance-local cache (``Tier.HBM``); the store emits them
for its DRAM and SSD tiers, with the store node's name as ``location``. The index
consumes the stream instead of walking anyone's structures.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["BlockRemoved", "BlockStored", "CacheEvent", "Tier"]


class Tier(StrEnum):
    """Where a location holds a block."""

    HBM = "hbm"
    """Instance-local cache of a prefill worker (GPU memory, or its stand-in)."""
    DRAM = "dram"
    """Store DRAM segment."""
    SSD = "ssd"
    """Store SSD tier."""


def _check(location: str, keys: tuple[int, ...]) -> None:
    if not location:
        raise ValueError("event location must be a non-empty name")
    for k in keys:
        if not 0 <= k < 2**64:
            raise ValueError(f"block key {k} is not an unsigned 64-bit integer")


@dataclass(frozen=True, slots=True)
class BlockStored:
    """``location`` now holds ``keys`` in ``tier``.

    Raises:
        ValueError: empty location or a key outside u64.
    """

    location: str
    tier: Tier
    keys: tuple[int, ...]

    def __post_init__(self) -> None:
        _check(self.location, self.keys)


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """``location`` no longer holds ``keys`` in ``tier`` (evicted, dropped or moved).

    Raises:
        ValueError: empty location or a key outside u64.
    """

    location: str
    tier: Tier
    keys: tuple[int, ...]

    def __post_init__(self) -> None:
        _check(self.location, self.keys)


CacheEvent = BlockStored | BlockRemoved
