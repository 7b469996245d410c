"""Sampling: nucleus (top_p) filtering and its bounds."""

from __future__ import annotations

import pytest
import torch

from mooncake_core.worker.sampling import Sampler, SamplingParams, nucleus


def test_nucleus_keeps_the_top_tokens_up_to_the_mass() -> None:
    p = torch.tensor([0.15, 0.5, 0.05, 0.3])
    # Ranked 0.5, 0.3, 0.15, 0.05: the mass above each is 0, 0.5, 0.8, 0.95.
    assert nucleus(p, 0.7).tolist() == pytest.approx([0.0, 0.5, 0.0, 0.3])
    assert nucleus(p, 0.5).tolist() == pytest.approx([0.0, 0.5, 0.0, 0.0])
    assert nucleus(p, 0.81).tolist() == pytest.approx([0.15, 0.5, 0.0, 0.3])
    assert nucleus(p, 1e-9).tolist() == pytest.approx([0.0, 0.5, 0.0, 0.0])


def test_a_tiny_nucleus_samples_the_greedy_token() -> None:
    logits = torch.tensor([0.1, 2.0, 1.9, -1.0])
    s = Sampler(SamplingParams(temperature=1.0, seed=3, top_p=1e-6))
    assert {s(logits) for _ in range(50)} == {1}
    wide = Sampler(SamplingParams(temperature=1.0, seed=3))
    assert len({wide(logits) for _ in range(200)}) > 1


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5, float("nan")])
def test_top_p_outside_0_1_is_refused(top_p: float) -> None:
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingParams(temperature=1.0, top_p=top_p)
