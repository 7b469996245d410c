"""Store master events -> prefix-index events, for the objects that are KV blocks.

The store names objects by key (``kv/<model>/<hex16>`` for blocks, see
:func:`~mooncake_core.conductor.hashing.block_store_key`) and places replicas on
segments. The index wants ``(location, tier, block key)``. This translation is pure:
given the index's current view (to know who held a removed key) it returns the events
to apply, so the live service and tests drive it the same way.

Mapping: a replica's location is ``location_of(segment of its first slice)`` (blocks
are small, one slice); by default the segment name itself. Everything the store holds
is ``Tier.DRAM`` unless told otherwise. Objects of other models or other key shapes are
ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from mooncake_core.conductor.events import BlockRemoved, BlockStored, CacheEvent, Tier
from mooncake_core.conductor.hashing import parse_block_store_key
from mooncake_core.conductor.index import PrefixIndex
from mooncake_core.store import Event, ObjectRemoved, ObjectStored, ReplicaDropped, SegmentUnmounted

__all__ = ["StoreFeed"]


class StoreFeed:
    """Translates store master events into :class:`BlockStored` / :class:`BlockRemoved`.

    Args:
        model: only blocks of this model are indexed.
        location_of: maps a segment name to the location the index and the network
            model use for it (default: the segment name).
        tier: tier of everything the store holds.
    """

    def __init__(
        self, model: str, location_of: Callable[[str], str] | None = None, tier: Tier = Tier.DRAM
    ) -> None:
        self.model = model
        self.location_of = location_of or (lambda segment: segment)
        self.tier = Tier(tier)

    def _key(self, object_key: str) -> int | None:
        parsed = parse_block_store_key(object_key)
        if parsed is None or parsed[0] != self.model:
            return None
        return parsed[1]

    def translate(self, event: Event, index: PrefixIndex) -> list[CacheEvent]:
        """Index events for one store event (empty when it concerns no block of the model).

        Args:
            event: a store master event.
            index: the index the result will be applied to (read, not changed).
        """
        if isinstance(event, ObjectStored):
            key = self._key(event.key)
            if key is None:
                return []
            locations = sorted({self.location_of(r[0].segment) for r in event.replicas if r})
            return [BlockStored(loc, self.tier, (key,)) for loc in locations]
        if isinstance(event, ObjectRemoved):
            key = self._key(event.key)
            if key is None:
                return []
            return [
                BlockRemoved(loc, tier, (key,))
                for loc, tier in index.holders_of(key)
                if tier == self.tier
            ]
        if isinstance(event, ReplicaDropped):
            key = self._key(event.key)
            if key is None:
                return []
            return [BlockRemoved(self.location_of(event.segment), self.tier, (key,))]
        if isinstance(event, SegmentUnmounted):
            loc = self.location_of(event.name)
            keys = index.keys_of(loc, self.tier)
            return [BlockRemoved(loc, self.tier, tuple(sorted(keys)))] if keys else []
        return []

    def apply(self, event: Event, index: PrefixIndex) -> int:
        """Translate and apply one store event; returns the index events applied."""
        out = self.translate(event, index)
        index.apply_all(out)
        return len(out)
