"""Baseline policies that ignore where the cache lives: random and round robin."""

from __future__ import annotations

import random

from mooncake_core.conductor.policies.base import Policy, PolicyChoice, PolicyContext

__all__ = ["RandomPolicy", "RoundRobinPolicy"]


def _require(ctx: PolicyContext) -> None:
    if not ctx.instances:
        raise ValueError("no prefill instance to schedule on")


class RandomPolicy(Policy):
    """Uniformly random prefill instance, from a seeded generator (reproducible runs).

    Args:
        seed: generator seed.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """Draw one instance; each serves from its own cache only."""
        _require(ctx)
        plans = ctx.all_local_plans()
        chosen = self._rng.randrange(len(plans))
        return PolicyChoice(chosen, plans, "draw")


class RoundRobinPolicy(Policy):
    """Instances in turn, in their configured order."""

    name = "round_robin"

    def __init__(self, seed: int = 0) -> None:
        del seed
        self._next = 0

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """Take the next instance in the rotation."""
        _require(ctx)
        plans = ctx.all_local_plans()
        chosen = self._next % len(plans)
        self._next = chosen + 1
        return PolicyChoice(chosen, plans, "turn")
