"""Conductor settings that are not (yet) in ``ConductorConfig``, with their defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mooncake_core.conductor.policies.adaptive import AdaptiveOptions
from mooncake_core.conductor.predictors import DecodeStepModel, PrefillTimeModel

__all__ = ["ConductorOptions", "default_decode_model", "default_prefill_model"]


def default_prefill_model() -> PrefillTimeModel:
    """An illustrative prefill model (~10k new tokens/s plus attention terms).

    Real deployments and the simulator fit their own from a profile
    (:meth:`PrefillTimeModel.fit`); this one only makes a Conductor usable out of the box.
    """
    return PrefillTimeModel((0.02, 1.0e-4, 2.0e-9, 1.0e-9))


def default_decode_model() -> DecodeStepModel:
    """An illustrative decode step model: 20 ms + 0.2 ms per request + 10 ns per context token."""
    return DecodeStepModel((0.02, 2.0e-4, 1.0e-8))


@dataclass(frozen=True, slots=True)
class ConductorOptions:
    """Knobs of the Conductor beyond ``ConductorConfig``.

    Attributes:
        bytes_per_token: KV bytes per token (LLaMA3-70B fp16: 320 KiB); sizes transfers.
        seed: seed of randomised policies.
        decode_load_threshold: fraction of decode slots at which early rejection starts.
        uniform_decode_time_s: starting estimate of one request's decode duration ``D``;
            ``None``: the first request's ``expected_output_len * predicted TBT``.
        decode_time_ewma: weight of each observed decode duration in ``D`` (0: keep fixed).
        decode_duration_window: observed decode durations kept for the predictive
            admission's learned forecast (0: never learn; always the paper's uniform ``D``).
        decode_duration_min_samples: durations needed before the learned forecast
            replaces the uniform one.
        min_retry_after_s: smallest retry hint.
        max_retry_after_s: largest retry hint.
        cache_on_prefill_done: the prefill instance holds the whole prompt's blocks once
            its prefill is done (its local cache keeps them); off when workers report
            their own ``BlockStored`` events.
        adaptive: knobs of the ``adaptive`` policy.
        max_tracked: most finished requests whose predictions are kept for ``on_actual``.
        calibration_memory: samples the online calibration remembers per instance
            (forgetting factor ``1 - 1/memory``; ``ConductorConfig.calibrate`` turns it on).
    """

    bytes_per_token: int = 327_680
    seed: int = 0
    decode_load_threshold: float = 1.0
    uniform_decode_time_s: float | None = None
    decode_time_ewma: float = 0.05
    decode_duration_window: int = 1024
    decode_duration_min_samples: int = 32
    min_retry_after_s: float = 0.5
    max_retry_after_s: float = 60.0
    cache_on_prefill_done: bool = True
    adaptive: AdaptiveOptions = field(default_factory=AdaptiveOptions)
    max_tracked: int = 1 << 17
    calibration_memory: float = 50.0

    def __post_init__(self) -> None:
        if self.bytes_per_token < 1:
            raise ValueError(f"bytes_per_token must be >= 1, got {self.bytes_per_token}")
        if not 0 < self.decode_load_threshold <= 10:
            raise ValueError(
                f"decode_load_threshold must be in (0, 10], got {self.decode_load_threshold}"
            )
        d = self.uniform_decode_time_s
        if d is not None and (not math.isfinite(d) or d <= 0):
            raise ValueError(f"uniform_decode_time_s must be positive, got {d}")
        if not 0 <= self.decode_time_ewma <= 1:
            raise ValueError(f"decode_time_ewma must be in [0, 1], got {self.decode_time_ewma}")
        if self.decode_duration_window < 0:
            raise ValueError(
                f"decode_duration_window must be >= 0, got {self.decode_duration_window}"
            )
        if self.decode_duration_window and not (
            1 <= self.decode_duration_min_samples <= self.decode_duration_window
        ):
            raise ValueError(
                f"decode_duration_min_samples must be in [1, decode_duration_window="
                f"{self.decode_duration_window}], got {self.decode_duration_min_samples}"
            )
        if not 0 <= self.min_retry_after_s <= self.max_retry_after_s:
            raise ValueError(
                f"need 0 <= min_retry_after_s <= max_retry_after_s, got "
                f"{self.min_retry_after_s}, {self.max_retry_after_s}"
            )
        if not (self.calibration_memory > 1 and math.isfinite(self.calibration_memory)):
            raise ValueError(f"calibration_memory must be > 1, got {self.calibration_memory}")
        if self.max_tracked < 1:
            raise ValueError(f"max_tracked must be >= 1, got {self.max_tracked}")
