"""Tiny model configs shared by the worker unit tests."""

from __future__ import annotations

import pytest
import torch

from mooncake_core.config.models import HashingConfig, ModelConfig

# Two cores are shared with other test runs: one intra-op thread is plenty for these sizes.
torch.set_num_threads(1)


@pytest.fixture
def tiny() -> ModelConfig:
    """2 layers, hidden 64, 4 heads over 2 KV heads (GQA)."""
    return ModelConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, max_seq_len=256)


@pytest.fixture
def tiny4() -> ModelConfig:
    """4 layers, for pipelines with uneven splits and more than one layer per stage."""
    return ModelConfig(layers=4, hidden=64, heads=4, kv_heads=2, intermediate=128, max_seq_len=256)


@pytest.fixture
def hashing() -> HashingConfig:
    """4-token blocks so short prompts span several blocks."""
    return HashingConfig(block_size=4)
