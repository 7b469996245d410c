"""Self-profiling: measure prefill and decode-step times of an engine on this machine.

The points are the inputs of the conductor's predictors
(:class:`~mooncake_core.conductor.predictors.PrefillPoint` and ``StepPoint``), and
:func:`profile_document` writes them as a cost profile that
:func:`mooncake_core.sim.costmodel.load_profile` reads, like ``sim/profiles/*.json``.

Measuring is IO-free except for the clock, which is injectable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mooncake_core.conductor.predictors import (
    DecodeStepModel,
    PrefillPoint,
    PrefillTimeModel,
    StepPoint,
)
from mooncake_core.worker.engine import InferenceEngine
from mooncake_core.worker.sampling import SamplingParams

__all__ = [
    "DEFAULT_DECODE_GRID",
    "DEFAULT_PREFILL_GRID",
    "WorkerProfile",
    "profile_document",
    "profile_engine",
]

DEFAULT_PREFILL_GRID: tuple[tuple[int, int], ...] = tuple(
    (n, p) for n in (64, 128, 256, 512) for p in (0, n // 4, n // 2, 3 * n // 4)
)
"""(input_len, prefix_len) points; prefixes are rounded down to whole blocks."""

DEFAULT_DECODE_GRID: tuple[tuple[int, int], ...] = tuple(
    (b, b * c) for b in (1, 2, 4, 8) for c in (32, 128, 256)
)
"""(batch, total context) points; context is split evenly over the batch."""


@dataclass(frozen=True, slots=True)
class WorkerProfile:
    """Measured points and the predictors fitted to them."""

    prefill_points: tuple[PrefillPoint, ...]
    step_points: tuple[StepPoint, ...]
    prefill_model: PrefillTimeModel
    decode_model: DecodeStepModel


def _prompt(n: int, salt: int, vocab: int) -> list[int]:
    # Distinct prompts per point, so nothing is reused unless the point asks for it.
    g = torch.Generator().manual_seed(salt)
    return torch.randint(0, min(vocab, 256), (n,), generator=g).tolist()


def profile_engine(
    engine: InferenceEngine,
    *,
    prefill_grid: Sequence[tuple[int, int]] = DEFAULT_PREFILL_GRID,
    decode_grid: Sequence[tuple[int, int]] = DEFAULT_DECODE_GRID,
    repeats: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> WorkerProfile:
    """Measure prefill and decode-step times and fit the conductor's predictors.

    Prefill point ``(n, p)``: the first ``p`` tokens (rounded down to blocks) are
    prefilled untimed, then the full prompt is timed with that prefix cached. Decode
    point ``(b, c)``: ``b`` sequences of ``c / b`` tokens each are prefilled untimed,
    then one batched step is timed. Each time is the median of ``repeats``.

    Args:
        engine: the engine to measure (its prefix cache is used and left warm).
        prefill_grid: ``(input_len, prefix_len)`` points.
        decode_grid: ``(batch, total_context)`` points.
        repeats: measurements per point.
        clock: seconds clock.

    Returns:
        Points and fitted models.

    Raises:
        ValueError: a point that does not fit ``max_seq_len`` or the cache, or too few
            points to fit.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    bs = engine.hashing.block_size
    vocab = engine.config.vocab_size
    one = SamplingParams(max_tokens=1)
    # Warm-up: the first calls pay one-time allocator and kernel selection costs.
    for _ in range(2):  # cold, then with the prefix cached
        warm = engine.prefill(_prompt(2 * bs + 1, 0, vocab), sampling=one).seq_id
        engine.decode_step([warm])
        engine.release(warm)
    salt = 0
    pre: list[PrefillPoint] = []
    for n, p in prefill_grid:
        if not 0 <= p < n:
            raise ValueError(f"prefill point ({n}, {p}) needs 0 <= prefix_len < input_len")
        p = (p // bs) * bs
        times = []
        for _ in range(repeats):
            salt += 1
            toks = _prompt(n, salt, vocab)
            if p:
                engine.release(engine.prefill(toks[: p + 1], sampling=one).seq_id)
            t0 = clock()
            r = engine.prefill(toks, sampling=one)
            times.append(clock() - t0)
            engine.release(r.seq_id)
            if r.reused_tokens != p:
                raise ValueError(f"prefill point ({n}, {p}) reused {r.reused_tokens} tokens")
        pre.append(PrefillPoint(n, p, sorted(times)[len(times) // 2]))
    steps: list[StepPoint] = []
    for b, c in decode_grid:
        if b < 1 or c < b:
            raise ValueError(f"decode point ({b}, {c}) needs batch >= 1 and context >= batch")
        each = c // b
        times = []
        for _ in range(repeats):
            sids = []
            for _ in range(b):
                salt += 1
                sids.append(engine.prefill(_prompt(each, salt, vocab), sampling=one).seq_id)
            t0 = clock()
            engine.decode_step(sids)
            times.append(clock() - t0)
            for s in sids:
                engine.release(s)
        steps.append(StepPoint(b, each * b, sorted(times)[len(times) // 2]))
    return WorkerProfile(
        tuple(pre), tuple(steps), PrefillTimeModel.fit(pre), DecodeStepModel.fit(steps)
    )


def profile_document(
    profile: WorkerProfile,
    engine: InferenceEngine,
    *,
    name: str,
    node_bandwidth_bps: float,
    max_batch: int,
) -> dict[str, Any]:
    """Build a cost-profile document (the ``sim/profiles/*.json`` format).

    Args:
        profile: measured points and fits.
        engine: the measured engine (model and cache sizes).
        name: profile name.
        node_bandwidth_bps: KV transfer bandwidth to assume (bytes/s); it is not
            measured here, the caller supplies it (e.g. from the transfer benchmark).
        max_batch: the decode instance's batch cap.

    Returns:
        A JSON-serialisable dict accepted by ``CostModel.from_dict``.
    """
    cfg = engine.config
    snap = engine.cache.snapshot()
    kv_per_token = snap.block_nbytes // snap.block_size
    capacity = snap.num_blocks * snap.block_size
    return {
        "name": name,
        "description": (
            f"{cfg.name}: {cfg.layers} layers, hidden {cfg.hidden}, {cfg.dtype} on "
            f"{engine.device}; measured by mooncake_core.worker.profile"
        ),
        "kv_bytes_per_token": kv_per_token,
        "layers": cfg.layers,
        "prefill": {
            "form": "T = c0 + c1*n + c2*n*p + c3*n^2 with n new tokens, p cached",
            "anchors": [
                {"input_len": q.input_len, "prefix_len": q.prefix_len, "seconds": q.seconds}
                for q in profile.prefill_points
            ],
            "coefficients": list(profile.prefill_model.coefficients),
        },
        "decode": {
            "form": "T_step = d0 + d1*batch + d2*context_tokens",
            "points": [
                {"batch": q.batch, "context": q.context, "seconds": q.seconds}
                for q in profile.step_points
            ],
            "coefficients": list(profile.decode_model.coefficients),
        },
        "decode_instance": {"kv_capacity_tokens": capacity, "max_batch": max_batch},
        "prefill_instance": {"local_cache_tokens": capacity},
        "node_network": {"achieved_bytes_per_s": float(node_bandwidth_bps)},
    }
