"""Global prefix index: which locations hold which KV blocks, and longest-prefix matching.

A *holder* is one ``(location, tier)`` pair: a prefill instance's local cache
(``Tier.HBM``) or a store node's DRAM or SSD tier. Each holder gets one bit; each key
maps to the bitmask of its holders::

    key  -> holders mask          prompt keys:  k0    k1    k2    k3
    k0   -> 0b0111                mask:         0111  0101  0001  0000
    k1   -> 0b0101                               |     |     '-- holder 0 matched 3
    k2   -> 0b1001                               |     '-- holder 2 matched 2 blocks
                                                 '-- holder 1 matched 1 block

Matching walks the prompt's keys once, narrowing the mask; a holder's match length is
the position where its bit drops out. Cost: O(blocks in the prompt + holders).

Replicas being fetched by a hotspot migration are *pending*: they count for matching
(the request that fetches them runs before anything queued behind it) and become held
on :meth:`PrefixIndex.confirm` or a ``BlockStored`` event, or vanish on
:meth:`PrefixIndex.cancel`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mooncake_core.conductor.events import BlockRemoved, BlockStored, CacheEvent, Tier

__all__ = ["Holder", "IndexSnapshot", "PrefixIndex", "PrefixMatch"]

Holder = tuple[str, Tier]
"""A ``(location, tier)`` pair that holds blocks."""


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Result of one longest-prefix match.

    Attributes:
        blocks: prompt length in blocks.
        by_holder: matched prefix, in blocks, for every holder with at least one block.
        by_location: best match over the tiers of each location.
        best_len: longest match over all holders (0: nothing cached).
    """

    blocks: int
    by_holder: dict[Holder, int]
    by_location: dict[str, int]
    best_len: int

    def holders_with(self, length: int) -> list[Holder]:
        """Holders whose match is at least ``length`` blocks, in a stable order."""
        return sorted(h for h, n in self.by_holder.items() if n >= length)


@dataclass(frozen=True, slots=True)
class IndexSnapshot:
    """Counters and sizes of the index.

    Attributes:
        distinct_blocks: keys held by at least one holder.
        entries: (key, holder) pairs held.
        pending_entries: (key, holder) pairs being fetched.
        per_holder: blocks held by each holder, sorted by holder.
        events_applied: stored/removed events consumed.
        stale_removes: removals of entries the index did not have.
        resyncs: resynchronisations done.
        drift_added: entries a resync added that events had missed.
        drift_removed: stale entries a resync removed.
    """

    distinct_blocks: int
    entries: int
    pending_entries: int
    per_holder: tuple[tuple[str, str, int], ...]
    events_applied: int
    stale_removes: int
    resyncs: int
    drift_added: int
    drift_removed: int


class PrefixIndex:
    """Holder bitmasks per block key, fed by cache events and periodic resyncs."""

    def __init__(self) -> None:
        self._slot_of: dict[Holder, int] = {}
        self._holder_of: list[Holder] = []
        self._keys_of: list[set[int]] = []
        self._mask: dict[int, int] = {}
        self._pending_mask: dict[int, int] = {}
        self._pending_refs: dict[tuple[int, int], int] = {}
        self._events = 0
        self._stale = 0
        self._resyncs = 0
        self._drift_added = 0
        self._drift_removed = 0

    # -- holders -------------------------------------------------------------------

    def _slot(self, holder: Holder) -> int:
        slot = self._slot_of.get(holder)
        if slot is None:
            slot = len(self._holder_of)
            self._slot_of[holder] = slot
            self._holder_of.append(holder)
            self._keys_of.append(set())
        return slot

    def holders(self) -> list[Holder]:
        """Every holder the index has seen, in registration order."""
        return list(self._holder_of)

    def keys_of(self, location: str, tier: Tier) -> frozenset[int]:
        """The keys one holder holds (a copy)."""
        slot = self._slot_of.get((location, Tier(tier)))
        return frozenset() if slot is None else frozenset(self._keys_of[slot])

    def holders_of(self, key: int) -> list[Holder]:
        """Every holder of ``key`` (pending replicas excluded), in registration order."""
        mask = self._mask.get(key, 0)
        out = []
        while mask:
            low = mask & -mask
            out.append(self._holder_of[low.bit_length() - 1])
            mask ^= low
        return out

    def holds(self, location: str, tier: Tier, key: int) -> bool:
        """Whether ``(location, tier)`` holds ``key`` (pending replicas excluded)."""
        slot = self._slot_of.get((location, Tier(tier)))
        return slot is not None and bool(self._mask.get(key, 0) >> slot & 1)

    # -- mutation ------------------------------------------------------------------

    def _add(self, slot: int, key: int) -> bool:
        keys = self._keys_of[slot]
        if key in keys:
            return False
        keys.add(key)
        self._mask[key] = self._mask.get(key, 0) | (1 << slot)
        return True

    def _remove(self, slot: int, key: int) -> bool:
        keys = self._keys_of[slot]
        if key not in keys:
            return False
        keys.discard(key)
        mask = self._mask[key] & ~(1 << slot)
        if mask:
            self._mask[key] = mask
        else:
            del self._mask[key]
        return True

    def apply(self, event: CacheEvent) -> None:
        """Apply one stored/removed event.

        Raises:
            TypeError: ``event`` is not a :class:`BlockStored` or :class:`BlockRemoved`.
        """
        if isinstance(event, BlockStored):
            slot = self._slot((event.location, event.tier))
            for k in event.keys:
                self._add(slot, k)
                self._settle_pending(k, slot)
        elif isinstance(event, BlockRemoved):
            slot = self._slot((event.location, event.tier))
            for k in event.keys:
                if not self._remove(slot, k):
                    self._stale += 1
        else:
            raise TypeError(f"not a cache event: {event!r}")
        self._events += 1

    def apply_all(self, events: Iterable[CacheEvent]) -> None:
        """Apply events in order (see :meth:`apply`)."""
        for e in events:
            self.apply(e)

    def resync(self, location: str, tier: Tier, keys: Iterable[int]) -> tuple[int, int]:
        """Replace one holder's view with the authoritative key set.

        Args:
            location: the worker or store node.
            tier: which of its tiers the keys describe.
            keys: everything it holds there now.

        Returns:
            ``(added, removed)``: entries the events had missed, and stale entries dropped;
            both are also added to the drift counters.

        Raises:
            ValueError: a key is not an unsigned 64-bit integer (nothing is changed).
        """
        new = set(keys)
        for k in new:
            if not isinstance(k, int) or not 0 <= k < 2**64:
                raise ValueError(f"block key {k!r} is not an unsigned 64-bit integer")
        slot = self._slot((location, Tier(tier)))
        old = self._keys_of[slot]
        removed = old - new
        added = new - old
        for k in removed:
            self._remove(slot, k)
        for k in added:
            self._add(slot, k)
            self._settle_pending(k, slot)
        self._resyncs += 1
        self._drift_added += len(added)
        self._drift_removed += len(removed)
        return len(added), len(removed)

    def drop_location(self, location: str) -> int:
        """Forget everything a location holds (it died or was drained); returns entries dropped."""
        dropped = 0
        for (loc, _tier), slot in list(self._slot_of.items()):
            if loc == location:
                for k in list(self._keys_of[slot]):
                    dropped += self._remove(slot, k)
        return dropped

    # -- pending replicas (hotspot migration) ----------------------------------------

    def add_pending(self, location: str, tier: Tier, keys: Sequence[int]) -> None:
        """Mark ``keys`` as being fetched into ``(location, tier)``."""
        slot = self._slot((location, Tier(tier)))
        bit = 1 << slot
        for k in keys:
            ref = (k, slot)
            self._pending_refs[ref] = self._pending_refs.get(ref, 0) + 1
            self._pending_mask[k] = self._pending_mask.get(k, 0) | bit

    def _drop_pending(self, key: int, slot: int, all_refs: bool) -> None:
        ref = (key, slot)
        count = self._pending_refs.get(ref, 0)
        if count == 0:
            return
        if count > 1 and not all_refs:
            self._pending_refs[ref] = count - 1
            return
        del self._pending_refs[ref]
        mask = self._pending_mask[key] & ~(1 << slot)
        if mask:
            self._pending_mask[key] = mask
        else:
            del self._pending_mask[key]

    def _settle_pending(self, key: int, slot: int) -> None:
        if self._pending_mask and (key, slot) in self._pending_refs:
            self._drop_pending(key, slot, all_refs=True)

    def confirm(self, location: str, tier: Tier, keys: Sequence[int]) -> None:
        """Pending replicas arrived: hold ``keys`` at ``(location, tier)``."""
        self.apply(BlockStored(location, Tier(tier), tuple(keys)))

    def cancel(self, location: str, tier: Tier, keys: Sequence[int]) -> None:
        """A fetch was abandoned: drop one pending reference per key."""
        slot = self._slot_of.get((location, Tier(tier)))
        if slot is None:
            return
        for k in keys:
            self._drop_pending(k, slot, all_refs=False)

    # -- queries -------------------------------------------------------------------

    def match(self, keys: Sequence[int], include_pending: bool = True) -> PrefixMatch:
        """Longest cached prefix of ``keys`` at every holder, in one pass.

        Args:
            keys: the prompt's block keys in order.
            include_pending: count replicas being fetched as held.

        Returns:
            The per-holder and per-location match lengths, in blocks.
        """
        n = len(keys)
        found: dict[int, int] = {}
        held = self._mask
        pend = self._pending_mask if include_pending else {}
        if n:
            mask = held.get(keys[0], 0)
            if pend:
                mask |= pend.get(keys[0], 0)
            i = 0
            while mask:
                i += 1
                if i == n:
                    break
                k = keys[i]
                nxt = mask & (held.get(k, 0) | pend.get(k, 0)) if pend else mask & held.get(k, 0)
                if nxt != mask:
                    gone = mask & ~nxt
                    while gone:
                        low = gone & -gone
                        found[low.bit_length() - 1] = i
                        gone ^= low
                    mask = nxt
            while mask:
                low = mask & -mask
                found[low.bit_length() - 1] = i
                mask ^= low
        by_holder: dict[Holder, int] = {}
        by_location: dict[str, int] = {}
        best = 0
        names = self._holder_of
        for slot, length in found.items():
            holder = names[slot]
            by_holder[holder] = length
            loc = holder[0]
            if length > by_location.get(loc, 0):
                by_location[loc] = length
            if length > best:
                best = length
        return PrefixMatch(n, by_holder, by_location, best)

    def snapshot(self) -> IndexSnapshot:
        """Sizes and counters, as an immutable value."""
        per = tuple(
            sorted(
                (loc, str(tier), len(self._keys_of[s])) for (loc, tier), s in self._slot_of.items()
            )
        )
        return IndexSnapshot(
            distinct_blocks=len(self._mask),
            entries=sum(len(k) for k in self._keys_of),
            pending_entries=len(self._pending_refs),
            per_holder=per,
            events_applied=self._events,
            stale_removes=self._stale,
            resyncs=self._resyncs,
            drift_added=self._drift_added,
            drift_removed=self._drift_removed,
        )
