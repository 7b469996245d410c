"""Cost model of one serving setup, loaded from a profile (JSON data, not code).

The simulator's ground truth and the Conductor's predictors are the *same* fitted
classes (:class:`~mooncake_core.conductor.predictors.PrefillTimeModel` and
:class:`~mooncake_core.conductor.predictors.DecodeStepModel`), so by default the compute
predictions are exact and every difference between policies comes from their choices.
``SimConfig.truth_*`` make the ground truth differ from the predictor (slower hardware,
uneven instances, noise, time outside the instance), which the Conductor's online
calibration then has to learn.

Prefill: the profile gives anchors ``(input_len, prefix_len, seconds)``; the physics of a
causal transformer fixes the shape. For ``n`` new tokens after ``p`` cached ones, linear
layers cost ``~n``, attention of the new tokens over all ``n + p`` positions costs
``~n^2 + 2np`` (half of the full ``(n+p)^2 - p^2`` square, times two for the K/V sides),
plus a constant per forward pass (reading the weights once)::

    T = c0 + c1*n + b*(n^2 + 2*n*p)      ->  PrefillTimeModel(c0, c1, 2b, b)

Three anchors give the three unknowns ``(c0, c1, b)`` exactly (a square linear system).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from mooncake_core.conductor.predictors import DecodeStepModel, PrefillPoint, PrefillTimeModel

__all__ = [
    "CostModel",
    "available_profiles",
    "fit_causal_prefill",
    "load_profile",
]


def fit_causal_prefill(anchors: Sequence[PrefillPoint]) -> PrefillTimeModel:
    """Solve ``T = c0 + c1*n + b*(n^2 + 2np)`` through exactly three anchors.

    Args:
        anchors: three profiled points with distinct shapes.

    Returns:
        The model with coefficients ``(c0, c1, 2b, b)``.

    Raises:
        ValueError: not three anchors, a prefix longer than its input, anchors that do not
            determine the coefficients, or a fit with a negative coefficient (unphysical).
    """
    if len(anchors) != 3:
        raise ValueError(f"need exactly 3 prefill anchors, got {len(anchors)}")
    rows = []
    for a in anchors:
        if not 0 <= a.prefix_len <= a.input_len:
            raise ValueError(f"anchor {a}: need 0 <= prefix_len <= input_len")
        n = a.input_len - a.prefix_len
        rows.append((1.0, float(n), float(n * n + 2 * n * a.prefix_len)))
    x = np.array(rows)
    y = np.array([a.seconds for a in anchors], dtype=float)
    # Scale columns: n^2 ~ 1e10 next to 1 would make the solve ill-conditioned.
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    try:
        sol = np.linalg.solve(x / scale, y) / scale
    except np.linalg.LinAlgError:
        raise ValueError(f"prefill anchors {list(anchors)} do not determine the model") from None
    c0, c1, b = (float(v) for v in sol)
    if min(c0, c1, b) < 0:
        raise ValueError(
            f"prefill anchors give negative coefficients c0={c0:.3g} c1={c1:.3g} b={b:.3g}: "
            "times must grow with tokens"
        )
    return PrefillTimeModel((c0, c1, 2 * b, b))


@dataclass(frozen=True)
class CostModel:
    """Everything the simulator needs to know about the hardware and the model.

    Attributes:
        name: profile name.
        prefill: prefill time model (seconds for ``(input_len, prefix_len)``).
        decode: decode step time model (seconds for ``(batch, context_tokens)``).
        kv_bytes_per_token: KV cache bytes per token.
        layers: transformer layers (layer-wise KV streaming exposes one layer's transfer).
        node_bandwidth_bps: achieved NIC bandwidth of one node, bytes/s (all its NICs).
        local_cache_tokens: DRAM prefix cache of one prefill instance, in tokens.
        decode_kv_capacity_tokens: KV tokens one decode instance can hold.
        decode_max_batch: most requests in one decode batch.
        cpp_min_chunk_tokens: prompts shorter than this never use a CPP group.
        cpp_efficiency: fraction of ideal speed-up a CPP pipeline keeps.
    """

    name: str
    prefill: PrefillTimeModel
    decode: DecodeStepModel
    kv_bytes_per_token: int
    layers: int
    node_bandwidth_bps: float
    local_cache_tokens: int
    decode_kv_capacity_tokens: int
    decode_max_batch: int
    cpp_min_chunk_tokens: int = 1024
    cpp_efficiency: float = 0.9

    def prefill_time(self, input_len: int, prefix_len: int, group: int = 1) -> float:
        """Seconds to prefill ``input_len`` tokens with ``prefix_len`` cached.

        Args:
            input_len: prompt tokens.
            prefix_len: cached prefix tokens (clamped to the input).
            group: CPP group size; prompts with at least ``group`` chunks of
                ``cpp_min_chunk_tokens`` new tokens split their compute over the group.
        """
        t = self.prefill.predict(input_len, prefix_len)
        if group > 1 and input_len - prefix_len >= group * self.cpp_min_chunk_tokens:
            t = t / (group * self.cpp_efficiency)
        return t

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of KV cache for ``tokens`` tokens."""
        return tokens * self.kv_bytes_per_token

    @classmethod
    def from_dict(cls, doc: dict) -> CostModel:
        """Build from a profile document (see ``profiles/*.json``).

        Raises:
            ValueError: a missing or malformed section, naming it.
        """
        try:
            pre = doc["prefill"]
            anchors = [
                PrefillPoint(int(a["input_len"]), int(a["prefix_len"]), float(a["seconds"]))
                for a in pre["anchors"]
            ]
            prefill = (
                PrefillTimeModel(pre["coefficients"])
                if "coefficients" in pre
                else fit_causal_prefill(anchors)
            )
            decode = DecodeStepModel(doc["decode"]["coefficients"])
            net = doc["node_network"]
            cpp = doc.get("cpp", {})
            return cls(
                name=str(doc["name"]),
                prefill=prefill,
                decode=decode,
                kv_bytes_per_token=int(doc["kv_bytes_per_token"]),
                layers=int(doc["layers"]),
                node_bandwidth_bps=float(net["achieved_bytes_per_s"]),
                local_cache_tokens=int(doc["prefill_instance"]["local_cache_tokens"]),
                decode_kv_capacity_tokens=int(doc["decode_instance"]["kv_capacity_tokens"]),
                decode_max_batch=int(doc["decode_instance"]["max_batch"]),
                cpp_min_chunk_tokens=int(cpp.get("min_chunk_tokens", 1024)),
                cpp_efficiency=float(cpp.get("pipeline_efficiency", 0.9)),
            )
        except KeyError as e:
            raise ValueError(f"profile {doc.get('name', '?')!r}: missing field {e}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"profile {doc.get('name', '?')!r}: {e}") from None


def available_profiles() -> list[str]:
    """Names of the profiles shipped in ``mooncake_core/sim/profiles``."""
    root = resources.files("mooncake_core.sim").joinpath("profiles")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_profile(name_or_path: str | Path = "llama3_70b_a800") -> CostModel:
    """Load a shipped profile by name, or any profile JSON by path.

    Raises:
        FileNotFoundError: neither a shipped profile nor an existing file.
        ValueError: malformed profile.
    """
    p = Path(name_or_path)
    if p.suffix == ".json" and p.exists():
        text = p.read_text(encoding="utf-8")
    else:
        res = resources.files("mooncake_core.sim").joinpath("profiles", f"{name_or_path}.json")
        if not res.is_file():
            raise FileNotFoundError(
                f"no cost profile {str(name_or_path)!r} (shipped: {', '.join(available_profiles())})"
            )
        text = res.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"profile {name_or_path}: invalid JSON ({e})") from None
    return CostModel.from_dict(doc)
