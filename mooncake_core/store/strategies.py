"""Allocation strategies: which segment gets the next slice.

Each strategy is a small object with ``choose(candidates, size, ctx)``. The master
passes only segments that are MOUNTED, can fit the slice and are allowed for this replica
(replicas of one object never share a segment), in segment-name order, so a strategy only
ranks. Randomness comes from an injected ``random.Random`` so tests are exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .errors import ErrorCode, InvalidArgumentError
from .segment import Segment


@dataclass(frozen=True, slots=True)
class AllocContext:
    """What a strategy may know about the request."""

    client_id: str
    """The writer (``local_first`` prefers its segments)."""
    preferred: tuple[str, ...] = ()
    """Segment names the writer prefers, best first."""


class AllocationStrategy(Protocol):
    """Ranks candidate segments for one slice."""

    name: str

    def choose(self, candidates: Sequence[Segment], size: int, ctx: AllocContext) -> Segment:
        """Pick one of ``candidates`` (never empty) for a slice of ``size`` bytes."""
        ...


class RandomStrategy:
    """Uniformly random among the candidates (upstream's default)."""

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Segment], size: int, ctx: AllocContext) -> Segment:
        return candidates[self._rng.randrange(len(candidates))]


class FreeRatioFirstStrategy:
    """The segment with the largest free fraction; ties go to the first by name."""

    name = "free_ratio_first"

    def choose(self, candidates: Sequence[Segment], size: int, ctx: AllocContext) -> Segment:
        return max(candidates, key=lambda s: s.allocator.free / s.capacity)


class LocalFirstStrategy:
    """The writer's own segments first (emptiest of them), else the fallback."""

    name = "local_first"

    def __init__(self, fallback: AllocationStrategy) -> None:
        self._fallback = fallback
        self._local = FreeRatioFirstStrategy()

    def choose(self, candidates: Sequence[Segment], size: int, ctx: AllocContext) -> Segment:
        local = [s for s in candidates if s.client_id == ctx.client_id]
        if local:
            return self._local.choose(local, size, ctx)
        return self._fallback.choose(candidates, size, ctx)


class PreferredStrategy:
    """The first of the writer's preferred segments that is a candidate, else the fallback."""

    name = "preferred"

    def __init__(self, fallback: AllocationStrategy) -> None:
        self._fallback = fallback

    def choose(self, candidates: Sequence[Segment], size: int, ctx: AllocContext) -> Segment:
        by_name = {s.name: s for s in candidates}
        for name in ctx.preferred:
            seg = by_name.get(name)
            if seg is not None:
                return seg
        return self._fallback.choose(candidates, size, ctx)


STRATEGIES: dict[str, Callable[[random.Random], AllocationStrategy]] = {
    "random": RandomStrategy,
    "free_ratio_first": lambda rng: FreeRatioFirstStrategy(),
    "local_first": lambda rng: LocalFirstStrategy(RandomStrategy(rng)),
    "preferred": lambda rng: PreferredStrategy(RandomStrategy(rng)),
}
"""Registry: strategy name (``MasterConfig.allocation_strategy``) -> factory."""


def make_strategy(name: str, rng: random.Random) -> AllocationStrategy:
    """Build the strategy called ``name``.

    Raises:
        InvalidArgumentError: unknown name (the message lists the known ones).
    """
    try:
        factory = STRATEGIES[name]
    except KeyError:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"unknown allocation strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})",
        ) from None
    return factory(rng)
