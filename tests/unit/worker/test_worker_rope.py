"""rope_inv_freq: plain, linear and llama3 scaling against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from mooncake_core.worker.checkpoint import rope_inv_freq

# head_dim 6, theta 1e6: frequencies 1, 1e-2, 1e-4; wavelengths 2*pi, 200*pi, 20000*pi.
PLAIN = [1.0, 1e-2, 1e-4]


def test_plain_rope_is_theta_to_the_minus_2i_over_d() -> None:
    torch.testing.assert_close(
        rope_inv_freq(6, 1e6, None), torch.tensor(PLAIN, dtype=torch.float64)
    )
    default = {"rope_type": "default", "factor": 8.0}
    assert torch.equal(rope_inv_freq(6, 1e6, default), rope_inv_freq(6, 1e6, None))


def test_linear_divides_every_frequency_by_the_factor() -> None:
    got = rope_inv_freq(6, 1e6, {"rope_type": "linear", "factor": 4.0})
    torch.testing.assert_close(got, torch.tensor([0.25, 2.5e-3, 2.5e-5], dtype=torch.float64))


def test_llama3_keeps_short_divides_long_and_blends_between() -> None:
    # original context 1000, low/high freq factors 1/4: wavelengths under 250 kept, over
    # 1000 divided by 8; 200*pi (628.3) is in between, blended with s = (1000/wl - 1) / 3.
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1000,
    }
    s = (1000 / (200 * math.pi) - 1) / 3
    want = [1.0, 1e-2 * ((1 - s) / 8 + s), 1e-4 / 8]
    torch.testing.assert_close(
        rope_inv_freq(6, 1e6, scaling), torch.tensor(want, dtype=torch.float64)
    )


def test_unknown_rope_type_is_refused() -> None:
    with pytest.raises(ValueError, match="RoPE type 'yarn' is not supported"):
        rope_inv_freq(6, 1e6, {"rope_type": "yarn", "factor": 2.0})
