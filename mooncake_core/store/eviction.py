"""Eviction: which objects to drop when the store is too full.

Triggers (decided by the master): usage above ``eviction_high_watermark``, or an
allocation that failed. A round asks the policy for ``target`` victims:

1. unpinned objects, least recently used first;
2. only if step 1 found fewer than ``target`` and soft-pinned eviction is allowed:
   soft-pinned objects, least recently used first. The master evicts these only if the
   trigger still holds after step 1 ("soft-pinned only when nothing else is left").

Never eligible: objects being written (PROCESSING), objects under a read lease,
hard-pinned objects, and keys the caller protects (the old value during an Upsert).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from .objects import ObjectMeta, PinLevel


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """Victims of one round, in eviction order."""

    unpinned: tuple[str, ...]
    soft_pinned: tuple[str, ...]


class EvictionPolicy(Protocol):
    """Picks victims from objects given in least-recently-used-first order."""

    name: str

    def plan(
        self,
        objects: Iterable[tuple[str, ObjectMeta]],
        now: float,
        target: int,
        pin_level: Callable[[str, float], PinLevel],
        allow_soft: bool,
        protected: Collection[str] = (),
    ) -> EvictionPlan:
        """Choose up to ``target`` victims (see the module docstring for the rules)."""
        ...


class LruEviction:
    """Least recently used first (access = PutEnd or GetReplicaList; Exist does not count)."""

    name = "lru"

    def plan(
        self,
        objects: Iterable[tuple[str, ObjectMeta]],
        now: float,
        target: int,
        pin_level: Callable[[str, float], PinLevel],
        allow_soft: bool,
        protected: Collection[str] = (),
    ) -> EvictionPlan:
        plain: list[str] = []
        soft: list[str] = []
        if target <= 0:
            return EvictionPlan((), ())
        for key, obj in objects:
            if not obj.complete or obj.held(now) or key in protected:
                continue
            level = pin_level(key, now)
            if level == PinLevel.NONE:
                plain.append(key)
                if len(plain) >= target:
                    break
            elif level == PinLevel.SOFT and allow_soft:
                soft.append(key)
        if len(plain) >= target:
            return EvictionPlan(tuple(plain), ())
        return EvictionPlan(tuple(plain), tuple(soft[: target - len(plain)]))


EVICTION_POLICIES: dict[str, Callable[[], EvictionPolicy]] = {"lru": LruEviction}
"""Registry of eviction policies by name."""
