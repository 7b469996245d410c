"""Profiling: grid points, prefix rounding, a profile document the simulator loads."""

from __future__ import annotations

import itertools
import json

import pytest

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.sim.costmodel import CostModel
from mooncake_core.worker import InferenceEngine, profile_document, profile_engine


def _ticks() -> object:
    # Each timed call spans one clock read pair; make durations 1, 2, 3... seconds.
    it = itertools.count()
    state = {"t": 0.0}

    def clock() -> float:
        n = next(it)
        if n % 2 == 0:
            return state["t"]
        state["t"] += n // 2 + 1
        return state["t"]

    return clock


def test_profile_points_and_document(tiny: ModelConfig, hashing: HashingConfig) -> None:
    eng = InferenceEngine(tiny, hashing, num_blocks=64, device="cpu")
    prof = profile_engine(
        eng,
        prefill_grid=[(16, 0), (16, 6), (32, 0), (32, 16), (24, 8)],
        decode_grid=[(1, 8), (2, 16), (3, 10)],
        repeats=1,
        clock=_ticks(),  # type: ignore[arg-type]
    )
    assert [(p.input_len, p.prefix_len, p.seconds) for p in prof.prefill_points] == [
        (16, 0, 1.0),
        (16, 4, 2.0),
        (32, 0, 3.0),
        (32, 16, 4.0),
        (24, 8, 5.0),
    ]
    assert [(p.batch, p.context, p.seconds) for p in prof.step_points] == [
        (1, 8, 6.0),
        (2, 16, 7.0),
        (3, 9, 8.0),
    ]
    assert eng.sequences() == ()
    doc = profile_document(prof, eng, name="tiny-cpu", node_bandwidth_bps=1e9, max_batch=8)
    model = CostModel.from_dict(json.loads(json.dumps(doc)))
    assert model.kv_bytes_per_token == eng.cache.block_nbytes // 4
    assert model.layers == 2 and model.decode_max_batch == 8
    assert model.prefill.coefficients == pytest.approx(prof.prefill_model.coefficients)


def test_bad_points_are_rejected(tiny: ModelConfig, hashing: HashingConfig) -> None:
    eng = InferenceEngine(tiny, hashing, num_blocks=64, device="cpu")
    with pytest.raises(ValueError, match=r"\(8, 8\)"):
        profile_engine(eng, prefill_grid=[(8, 8)], decode_grid=[], repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        profile_engine(eng, repeats=0)
