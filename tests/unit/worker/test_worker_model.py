"""TinyLlama: deterministic weights, stage builds, hook order, input validation."""

from __future__ import annotations

import pytest
import torch

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker import InferenceEngine, LayerKVEvent, SamplingParams, TinyLlama


def test_same_seed_gives_bit_identical_weights(tiny: ModelConfig) -> None:
    a, b = TinyLlama(tiny).weights(), TinyLlama(tiny).weights()
    assert a.keys() == b.keys()
    assert len(a) == 3 + 9 * tiny.layers
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_other_seed_gives_other_weights(tiny: ModelConfig) -> None:
    a = TinyLlama(tiny).weights()
    b = TinyLlama(tiny.model_copy(update={"seed": 1})).weights()
    assert not torch.equal(a["layers.0.wq"], b["layers.0.wq"])
    assert not torch.equal(a["embedding"], b["embedding"])


def test_stage_builds_exactly_the_full_models_layers(tiny4: ModelConfig) -> None:
    full = TinyLlama(tiny4).weights()
    stage = TinyLlama(tiny4, layers=range(1, 3)).weights()
    assert {k for k in stage if k.startswith("layers.")} == {
        k for k in full if k.startswith(("layers.1.", "layers.2."))
    }
    for name, t in stage.items():
        assert torch.equal(t, full[name]), name


def test_bad_layer_ranges_and_tokens_are_rejected(tiny: ModelConfig) -> None:
    with pytest.raises(ValueError, match="layer range"):
        TinyLlama(tiny, layers=range(1, 3))
    with pytest.raises(ValueError, match="layer range"):
        TinyLlama(tiny, layers=range(0))
    m = TinyLlama(tiny, layers=range(1, 2))
    x = torch.zeros(1, 2, tiny.hidden)
    with pytest.raises(ValueError, match="not within the built layers"):
        m.run_layers(x, torch.tensor([0]), layers=range(0, 2))
    with pytest.raises(ValueError, match=r"\[0, 259\)"):
        m.embed(torch.tensor([[1, 259]]))


def test_positions_past_max_seq_len_are_rejected(tiny: ModelConfig) -> None:
    m = TinyLlama(tiny)
    x = m.embed(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="max_seq_len"):
        m.run_layers(x, torch.tensor([tiny.max_seq_len - 1]))


def test_layer_hook_fires_once_per_layer_in_order(
    tiny4: ModelConfig, hashing: HashingConfig
) -> None:
    eng = InferenceEngine(tiny4, hashing, num_blocks=32, device="cpu")
    prompt = list(range(1, 14))  # 13 tokens
    eng.release(eng.prefill(prompt[:9]).seq_id)  # caches 2 blocks (8 tokens)
    seen: list[LayerKVEvent] = []
    r = eng.prefill(prompt, layer_hook=seen.append)
    assert r.reused_tokens == 8
    assert [e.layer for e in seen] == [0, 1, 2, 3]
    table = eng.cache.block_table(r.seq_id)
    for e in seen:
        assert (e.seq_id, e.start, e.end) == (r.seq_id, 8, 13)
        assert e.k.shape == e.v.shape == (tiny4.kv_heads, 5, tiny4.hidden // tiny4.heads)
        assert e.blocks == table[2:4]
        # Block 2 is complete (stored under its key); block 3 is partial (never stored).
        assert e.keys == (r.block_keys[2], None)
        # The hook runs after the write: the layer's slot in the paged block holds the K.
        k, _ = eng.cache.gather([r.seq_id], e.layer, 13)
        assert torch.equal(k[0, :, 8:13], e.k)


def test_bfloat16_model_runs_and_stores_bf16_kv(tiny: ModelConfig, hashing: HashingConfig) -> None:
    cfg = tiny.model_copy(update={"dtype": "bfloat16"})
    eng = InferenceEngine(cfg, hashing, num_blocks=16, device="cpu")
    assert eng.cache.pool.dtype == torch.bfloat16
    assert eng.cache.block_nbytes == 2 * 2 * 2 * 4 * 16 * 2
    out = eng.generate([[1, 2, 3, 4, 5]], SamplingParams(max_tokens=3, stop_at_eos=False))
    assert out == [
        eng.generate_reference([1, 2, 3, 4, 5], 3, sampling=SamplingParams(stop_at_eos=False))
    ]
    assert len(out[0]) == 3


def _digest(cfg: ModelConfig) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(TinyLlama(cfg).weights().items()):
        h.update(name.encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_weights_are_bit_identical_in_another_process(tiny: ModelConfig) -> None:
    import subprocess
    import sys

    code = (
        "import hashlib, torch\n"
        "from mooncake_core.config.models import ModelConfig\n"
        "from mooncake_core.worker import TinyLlama\n"
        f"cfg = ModelConfig.model_validate_json({tiny.model_dump_json()!r})\n"
        "h = hashlib.sha256()\n"
        "for name, t in sorted(TinyLlama(cfg).weights().items()):\n"
        "    h.update(name.encode())\n"
        "    h.update(t.contiguous().view(torch.uint8).numpy().tobytes())\n"
        "print(h.hexdigest())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == _digest(tiny)
