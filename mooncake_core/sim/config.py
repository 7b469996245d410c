"""Options of one simulation run, and setting any field by a dotted name (for sweeps)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from mooncake_core.config.models import ConductorConfig

__all__ = ["SimConfig", "set_field"]


@dataclass(frozen=True)
class SimConfig:
    """The simulated cluster and how to run it.

    Attributes:
        prefill_instances: prefill instances (one 8-GPU node each).
        decode_instances: decode instances (one node each).
        cpp_group: nodes per CPP group; each group is one scheduling unit whose long
            prompts are split over its nodes (1: no CPP).
        local_cache_tokens: DRAM prefix cache per prefill instance (``None``: the
            profile's, 3M tokens for the paper setup; ``-1``: unlimited).
        store_pool_tokens: capacity of a separate global store pool that every prefill
            writes its blocks to and every instance may fetch from (0: none).
        store_nodes: nodes the store pool is spread over (sets its NIC bandwidth).
        node_bandwidth_bps: what-if override of the profile's achieved NIC bandwidth per
            node (bytes/s), e.g. 12.5e9 for one 100 Gbps NIC.
        decode_max_batch: what-if override of the profile's decode batch limit (slots);
            the Conductor's decode admission counts these slots.
        profile: cost profile name or path.
        conductor: scheduler settings (policy, threshold, admission, SLOs).
        seed: seed for the random policy and any sampling.
        simulate_decode: run decode batches (off: requests end at their first token,
            for TTFT-only experiments with admission ``none``).
        load_sample_interval_s: period of the load samples (prefill/decode load plot).
        audit: keep every Decision in ``Simulator.decisions`` (memory heavy on full traces).
        truth_prefill_scale: the cluster's prefill compute takes this many times what the
            profile (the Conductor's predictor) says: a profile measured on other
            hardware or load (1: the predictor is exact).
        truth_prefill_spread: prefill instances differ in speed: instance ``i`` of ``n``
            computes ``1 + spread * (2i/(n-1) - 1)`` times slower (0: all alike).
        truth_prefill_noise: each prefill's compute is multiplied by a log-normal factor
            of this standard deviation (mean 1), drawn from ``seed`` (0: none).
        truth_overhead_s: seconds added to every TTFT outside the prefill instance
            (dispatch, RPCs, the reply), which no predictor models (0: none).
    """

    prefill_instances: int = 16
    decode_instances: int = 16
    cpp_group: int = 1
    local_cache_tokens: int | None = None
    store_pool_tokens: int = 0
    store_nodes: int = 1
    node_bandwidth_bps: float | None = None
    decode_max_batch: int | None = None
    profile: str = "llama3_70b_a800"
    conductor: ConductorConfig = field(
        default_factory=lambda: ConductorConfig(admission="none", policy="kvcache_centric")
    )
    seed: int = 0
    simulate_decode: bool = True
    load_sample_interval_s: float = 10.0
    audit: bool = False
    truth_prefill_scale: float = 1.0
    truth_prefill_spread: float = 0.0
    truth_prefill_noise: float = 0.0
    truth_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.prefill_instances < 1 or self.decode_instances < 1:
            raise ValueError(
                f"need at least one prefill and one decode instance, got "
                f"{self.prefill_instances}P+{self.decode_instances}D"
            )
        if self.cpp_group < 1 or self.prefill_instances % self.cpp_group:
            raise ValueError(
                f"cpp_group {self.cpp_group} must be >= 1 and divide prefill_instances "
                f"{self.prefill_instances}"
            )
        lct = self.local_cache_tokens
        if lct is not None and lct < -1:
            raise ValueError(f"local_cache_tokens must be >= 0, -1 (unlimited) or None, got {lct}")
        if self.store_pool_tokens < 0 or self.store_nodes < 1:
            raise ValueError(
                f"store_pool_tokens must be >= 0 and store_nodes >= 1, got "
                f"{self.store_pool_tokens}, {self.store_nodes}"
            )
        bw = self.node_bandwidth_bps
        if bw is not None and not (
            isinstance(bw, int | float) and not isinstance(bw, bool) and 0 < bw < float("inf")
        ):
            raise ValueError(f"node_bandwidth_bps must be a positive finite number, got {bw}")
        if self.decode_max_batch is not None and self.decode_max_batch < 1:
            raise ValueError(f"decode_max_batch must be >= 1, got {self.decode_max_batch}")
        if not (0 < self.truth_prefill_scale < float("inf")):
            raise ValueError(f"truth_prefill_scale must be > 0, got {self.truth_prefill_scale}")
        if not 0 <= self.truth_prefill_spread < 1:
            raise ValueError(
                f"truth_prefill_spread must be in [0, 1), got {self.truth_prefill_spread}"
            )
        if not 0 <= self.truth_prefill_noise <= 2:
            raise ValueError(
                f"truth_prefill_noise must be in [0, 2], got {self.truth_prefill_noise}"
            )
        if not 0 <= self.truth_overhead_s < float("inf"):
            raise ValueError(f"truth_overhead_s must be >= 0, got {self.truth_overhead_s}")
        if not self.load_sample_interval_s > 0:
            raise ValueError(
                f"load_sample_interval_s must be > 0, got {self.load_sample_interval_s}"
            )


def _coerce(value: Any, current: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if isinstance(current, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(current, int):
            return int(float(text)) if "e" in text.lower() else int(text)
        if isinstance(current, float):
            return float(text)
    except ValueError:
        raise ValueError(f"{name}: cannot read {value!r} as {type(current).__name__}") from None
    if current is None:
        # Optional fields default to None: take the most specific number the text is.
        if text.lower() == "none":
            return None
        for conv in (int, float):
            try:
                return conv(text)
            except ValueError:
                pass
    return text


def set_field(config: SimConfig, dotted: str, value: Any) -> SimConfig:
    """Return a copy of ``config`` with one field replaced, e.g. ``conductor.policy``.

    String values are converted to the field's type (``"4"`` for an int, ``"1.5"`` for a
    float, ``"true"`` for a bool), so command-line sweeps can pass text.

    Raises:
        ValueError: unknown field (the message lists the known ones) or a bad value.
    """
    head, _, rest = dotted.partition(".")
    names = [f.name for f in dataclasses.fields(SimConfig)]
    if head not in names:
        raise ValueError(f"unknown field {dotted!r}; known: {', '.join(names)}")
    current = getattr(config, head)
    if head == "conductor":
        if not rest:
            raise ValueError("name a conductor field, e.g. conductor.kvcache_balancing_threshold")
        fields = ConductorConfig.model_fields
        if rest not in fields:
            raise ValueError(
                f"unknown field {dotted!r}; conductor fields: {', '.join(sorted(fields))}"
            )
        data = current.model_dump()
        data[rest] = _coerce(value, data[rest], dotted)
        try:
            new = ConductorConfig.model_validate(data)
        except ValidationError as e:
            raise ValueError(f"{dotted}={value!r}: {e.errors()[0]['msg']}") from None
        return dataclasses.replace(config, conductor=new)
    if rest:
        raise ValueError(f"field {head!r} has no sub-field {rest!r}")
    return dataclasses.replace(config, **{head: _coerce(value, current, dotted)})
