"""Pins: protection against eviction, set by key or by key prefix at any time.

- A **hard** pin never expires and its objects are never evicted.
- A **soft** pin has a TTL; its objects are evicted only when nothing unpinned is left
  (and only if ``evict_soft_pinned`` allows it).
- A **prefix** pin is a rule, not a mark on objects: it covers every key under the prefix,
  including keys written after the pin was set.

An object's effective level is the strongest live pin covering it (its key pin or any
prefix rule). Pins never block an explicit Remove: they are about eviction only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .objects import PinLevel


@dataclass(frozen=True, slots=True)
class Pin:
    """One pin: on a key or a prefix; hard, or soft until ``expires_at`` (master clock)."""

    target: str
    is_prefix: bool
    hard: bool
    expires_at: float | None

    def live(self, now: float) -> bool:
        """Whether the pin still applies at ``now``."""
        return self.hard or (self.expires_at is not None and self.expires_at > now)


class PinTable:
    """Key pins and prefix rules."""

    __slots__ = ("_keys", "_prefixes")

    def __init__(self) -> None:
        self._keys: dict[str, Pin] = {}
        self._prefixes: dict[str, Pin] = {}

    def __len__(self) -> int:
        return len(self._keys) + len(self._prefixes)

    @property
    def key_pins(self) -> int:
        """Number of key pins."""
        return len(self._keys)

    @property
    def prefix_pins(self) -> int:
        """Number of prefix rules."""
        return len(self._prefixes)

    def set(self, target: str, *, is_prefix: bool, hard: bool, expires_at: float | None) -> Pin:
        """Set (or replace) the pin on a key or prefix.

        Returns:
            The new pin.
        """
        pin = Pin(target, is_prefix, hard, None if hard else expires_at)
        (self._prefixes if is_prefix else self._keys)[target] = pin
        return pin

    def get(self, target: str, *, is_prefix: bool) -> Pin | None:
        """The pin set on exactly this key or prefix, if any."""
        return (self._prefixes if is_prefix else self._keys).get(target)

    def clear(self, target: str, *, is_prefix: bool) -> Pin | None:
        """Remove the pin on exactly this key or prefix; returns it, or None if there was none."""
        return (self._prefixes if is_prefix else self._keys).pop(target, None)

    def level(self, key: str, now: float) -> tuple[PinLevel, float | None]:
        """Effective pin level of ``key`` and, for SOFT, when the last covering pin ends."""
        best = PinLevel.NONE
        until: float | None = None
        pin = self._keys.get(key)
        candidates = [pin] if pin is not None else []
        if self._prefixes:
            candidates.extend(p for p in self._prefixes.values() if key.startswith(p.target))
        for p in candidates:
            if not p.live(now):
                continue
            if p.hard:
                return PinLevel.HARD, None
            best = PinLevel.SOFT
            end = p.expires_at if p.expires_at is not None else now
            until = end if until is None else max(until, end)
        return best, until

    def expire(self, now: float) -> list[Pin]:
        """Drop soft pins whose TTL has run out; returns them (key pins first, sorted)."""
        gone: list[Pin] = []
        for table in (self._keys, self._prefixes):
            dead = sorted(t for t, p in table.items() if not p.live(now))
            gone.extend(table.pop(t) for t in dead)
        return gone

    def pins(self, now: float) -> list[Pin]:
        """Live pins, key pins then prefix rules, each sorted by target."""
        out = [p for _, p in sorted(self._keys.items()) if p.live(now)]
        out.extend(p for _, p in sorted(self._prefixes.items()) if p.live(now))
        return out
