"""Least predicted queue: the paper's load-balancing baseline."""

from __future__ import annotations

from mooncake_core.conductor.policies.base import Policy, PolicyChoice, PolicyContext

__all__ = ["LoadBalancePolicy"]


class LoadBalancePolicy(Policy):
    """Prefill instance with the least predicted queue time ``T_queue``; ties to the first."""

    name = "load_balance"

    def __init__(self, seed: int = 0) -> None:
        del seed

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """Pick ``argmin T_queue(i)``; the instance then serves from its own cache."""
        if not ctx.instances:
            raise ValueError("no prefill instance to schedule on")
        plans = ctx.all_local_plans()
        chosen = 0
        for i in range(1, len(plans)):
            if plans[i].queue_s < plans[chosen].queue_s:
                chosen = i
        return PolicyChoice(chosen, plans, "queue")
