"""Scheduling policies: one strategy class per policy, selected by name.

``make_policy(name, seed=..., threshold=...)`` builds the policy named by
``ConductorConfig.policy``.
"""

from __future__ import annotations

from mooncake_core.conductor.policies.adaptive import (
    AdaptiveOptions,
    AdaptivePolicy,
    CorrectionSupport,
)
from mooncake_core.conductor.policies.base import (
    Policy,
    PolicyChoice,
    PolicyContext,
    PrefillFeedback,
    PrefillPlan,
)
from mooncake_core.conductor.policies.cache_aware import CacheAwarePolicy
from mooncake_core.conductor.policies.kvcache_centric import KVCacheCentricPolicy, fetch_ratio
from mooncake_core.conductor.policies.load_balance import LoadBalancePolicy
from mooncake_core.conductor.policies.simple import RandomPolicy, RoundRobinPolicy

__all__ = [
    "POLICIES",
    "AdaptiveOptions",
    "AdaptivePolicy",
    "CacheAwarePolicy",
    "CorrectionSupport",
    "KVCacheCentricPolicy",
    "LoadBalancePolicy",
    "Policy",
    "PolicyChoice",
    "PolicyContext",
    "PrefillFeedback",
    "PrefillPlan",
    "RandomPolicy",
    "RoundRobinPolicy",
    "fetch_ratio",
    "make_policy",
]

POLICIES: dict[str, type[Policy]] = {
    p.name: p
    for p in (
        RandomPolicy,
        RoundRobinPolicy,
        LoadBalancePolicy,
        CacheAwarePolicy,
        KVCacheCentricPolicy,
        AdaptivePolicy,
    )
}
"""Policy classes by configuration name."""


def make_policy(
    name: str,
    *,
    seed: int = 0,
    threshold: float = 1.5,
    adaptive: AdaptiveOptions | None = None,
) -> Policy:
    """Build the policy called ``name``.

    Args:
        name: one of :data:`POLICIES`.
        seed: seed of randomised policies.
        threshold: ``kvcache_balancing_threshold`` (start value for ``adaptive``).
        adaptive: knobs of the adaptive policy.

    Raises:
        ValueError: unknown name (the message lists the known ones) or a bad threshold.
    """
    if name == "adaptive":
        return AdaptivePolicy(seed, threshold, adaptive)
    if name == "kvcache_centric":
        return KVCacheCentricPolicy(seed, threshold)
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(
            f"unknown scheduling policy {name!r}; known: {', '.join(sorted(POLICIES))}"
        )
    return cls(seed)  # type: ignore[call-arg]
