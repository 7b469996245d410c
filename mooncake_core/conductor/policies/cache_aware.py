"""Local cache-aware: minimise predicted TTFT using each instance's own prefix only."""

from __future__ import annotations

from mooncake_core.conductor.policies.base import (
    Policy,
    PolicyChoice,
    PolicyContext,
    argmin_ttft,
)

__all__ = ["CacheAwarePolicy"]


class CacheAwarePolicy(Policy):
    """``argmin_i T_queue(i) + T_prefill(len, local_prefix(i))``; never transfers KV."""

    name = "cache_aware"

    def __init__(self, seed: int = 0) -> None:
        del seed

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """Pick the instance with the lowest local-only TTFT; ties to the first."""
        if not ctx.instances:
            raise ValueError("no prefill instance to schedule on")
        plans = ctx.all_local_plans()
        chosen = argmin_ttft(plans)
        return PolicyChoice(chosen, plans, "ttft")
