"""Global KVCache-centric scheduling: the paper's Algorithm 1 with hotspot migration.

For each prefill instance ``i`` with local prefix ``l_i`` blocks, and the longest prefix
``b`` held anywhere (any instance or store tier)::

    if b > l_i and (l_i == 0 or b / l_i > threshold):      # worth fetching
        T_i = T_queue(i) + T_transfer(b - l_i blocks, cheapest holder -> i) + T_prefill(len, b)
    else:
        T_i = T_queue(i) + T_prefill(len, l_i)
    choose argmin T_i (ties: first instance)

When the winner's plan fetches, the Conductor issues a hotspot migration: the instance
keeps the fetched blocks, so a hot prefix gains a replica wherever it is scheduled.
"""

from __future__ import annotations

import math

from mooncake_core.conductor.policies.base import (
    Policy,
    PolicyChoice,
    PolicyContext,
    PrefillPlan,
    argmin_ttft,
)

__all__ = ["KVCacheCentricPolicy", "fetch_ratio"]


def fetch_ratio(best: int, local: int) -> float:
    """``best / local`` prefix ratio; ``inf`` when the instance holds nothing of it."""
    if local <= 0:
        return math.inf if best > 0 else 0.0
    return best / local


class KVCacheCentricPolicy(Policy):
    """Algorithm 1 with a fixed ``kvcache_balancing_threshold``.

    Args:
        seed: unused (deterministic policy).
        threshold: fetch the remote prefix when ``best / local`` exceeds this.

    Raises:
        ValueError: a negative or non-finite threshold.
    """

    name = "kvcache_centric"

    def __init__(self, seed: int = 0, threshold: float = 1.5) -> None:
        del seed
        if not math.isfinite(threshold) or threshold < 0:
            raise ValueError(
                f"kvcache_balancing_threshold must be >= 0 and finite, got {threshold!r}"
            )
        self.threshold: float | None = float(threshold)

    def worth_fetching(self, best: int, local: int) -> bool:
        """Algorithm 1's test: a longer prefix exists elsewhere and the ratio passes the threshold."""
        if best <= local:
            return False
        return local <= 0 or best / local > (self.threshold or 0.0)

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """Evaluate every instance's plan and take the lowest predicted TTFT."""
        if not ctx.instances:
            raise ValueError("no prefill instance to schedule on")
        best = ctx.match.best_len
        by_location = ctx.match.by_location
        theta = self.threshold or 0.0
        fetch_plan, local_plan = ctx.fetch_plan, ctx.local_plan
        plans: list[PrefillPlan] = []
        for state in ctx.instances:
            local = by_location.get(state.name, 0)
            # worth_fetching(), inlined: this loop runs once per instance per request.
            if best > local and (local <= 0 or best / local > theta):
                plans.append(fetch_plan(state))
            else:
                plans.append(local_plan(state))
        chosen = argmin_ttft(plans)
        winner = plans[chosen]
        alternative = None
        if best > winner.local_blocks:
            state = ctx.instances[chosen]
            alternative = ctx.local_plan(state) if winner.fetches else ctx.fetch_plan(state)
            if alternative.fetches == winner.fetches:
                alternative = None
        return PolicyChoice(
            chosen,
            tuple(plans),
            "ttft",
            alternative,
            fetch_ratio(best, winner.local_blocks),
        )
