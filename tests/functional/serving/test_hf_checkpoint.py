"""Hugging Face model directories (Llama, Qwen2, Mistral) in our own model and tokenizer.

The test writes its own tiny random checkpoints with ``transformers`` (``save_pretrained``,
safetensors) and a byte-level BPE ``tokenizer.json`` it trains with ``tokenizers``, then
checks against ``transformers`` loading the same directory as the independent reference:
greedy token ids through our :class:`InferenceEngine`, RoPE frequencies (llama3 and linear
scaling), tokenizer ids and chat template text. Also: a sharded checkpoint loads the same
weights, and what we refuse is a one-line :class:`CheckpointError`. Skips with the reason
when ``transformers``, ``safetensors`` or ``tokenizers`` is not installed.
"""

from __future__ import annotations

import pytest
from reference_text import CORPUS, QUESTIONS, require

require("safetensors", "tokenizers", "transformers")

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from mooncake_core.config.models import ModelConfig  # noqa: E402
from mooncake_core.worker.bpe_tokenizer import BPETokenizer, tokenizer_for  # noqa: E402
from mooncake_core.worker.checkpoint import (  # noqa: E402
    CheckpointError,
    checkpoint_config,
    open_checkpoint,
    rope_inv_freq,
    rope_scaling,
)
from mooncake_core.worker.engine import InferenceEngine  # noqa: E402
from mooncake_core.worker.model import TinyLlama  # noqa: E402
from mooncake_core.worker.sampling import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(300)

FAMILIES = ("llama", "qwen2", "mistral")
VOCAB = 400
GEN_TOKENS = 16
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog. What is the capital of France? Paris.",
    "Write a haiku about the sea: waves fold into foam. List three prime numbers: 2, 3, 5.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i); }',
    "我们今天去北京天安门广场。你好，世界！人工智能正在改变世界。",
    "emoji: 🚀🔥👍🏽 😀 and ünïcödé, naïve café",
    "1234567890 3.14159 -42 0x1F",
]
# Qwen2's own pre-tokenizer split (transformers' Qwen2Tokenizer rebuilds it this way).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = {
    "llama": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
              "<|end_header_id|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "mistral": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
}  # fmt: skip
TEMPLATES = {
    "llama": (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
        "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
        "{% endif %}"
    ),
    "qwen2": (
        "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for m in messages %}"
        "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
        "{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
}


def _tokenizer(family: str) -> Any:
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tk = Tokenizer(models.BPE())
    if family == "qwen2":
        tk.normalizer = normalizers.NFC()
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS[family],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(TRAINING_TEXT * 20, trainer)
    if family == "qwen2":
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
    else:  # Llama 3 and Mistral files put BOS first
        bos = SPECIALS[family][0 if family == "llama" else 1]
        tk.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B:1",
            special_tokens=[(bos, tk.token_to_id(bos))],
        )
    return tk


def _build(family: str, path: Path) -> Path:
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    tk = _tokenizer(family)
    tid = tk.token_to_id
    shape: dict[str, Any] = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128}
    shape |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    shape["initializer_range"] = 0.2
    tok_cfg: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    model: Any
    if family == "llama":
        llama3 = {"rope_type": "llama3", "rope_theta": 10_000.0, "factor": 8.0}
        llama3 |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
        llama3["original_max_position_embeddings"] = 64
        cfg = LlamaConfig(
            **shape,
            max_position_embeddings=256,
            attention_bias=True,  # q/k/v/o bias
            tie_word_embeddings=False,
            rope_parameters=llama3,
            bos_token_id=tid("<|begin_of_text|>"),
            eos_token_id=[tid("<|eot_id|>"), tid("<|end_of_text|>")],
        )
        torch.manual_seed(1)
        model = LlamaForCausalLM(cfg)
        tok_cfg |= {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    elif family == "qwen2":
        cfg = Qwen2Config(
            **shape,
            max_position_embeddings=512,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
            eos_token_id=tid("<|im_end|>"),
        )
        torch.manual_seed(2)
        model = Qwen2ForCausalLM(cfg)
        tok_cfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None}
        tok_cfg |= {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    else:
        cfg = MistralConfig(
            **shape,
            max_position_embeddings=512,
            sliding_window=128,  # caps our max_seq_len
            rope_parameters={"rope_type": "linear", "rope_theta": 10_000.0, "factor": 2.0},
            bos_token_id=tid("<s>"),
            eos_token_id=tid("</s>"),
        )
        torch.manual_seed(3)
        model = MistralForCausalLM(cfg)
        tok_cfg |= {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # Qwen2 starts them at zero: make them matter
                p.normal_(0.0, 0.5)
    model.save_pretrained(path)
    tk.save(str(path / "tokenizer.json"))
    tok_cfg["chat_template"] = TEMPLATES[family]
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {f: _build(f, root / f) for f in FAMILIES}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def reference(dirs: dict[str, Path], family: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(dirs[family])
    model = AutoModelForCausalLM.from_pretrained(dirs[family], dtype=torch.float32)
    return tok, model.eval()


def _chat(family: str) -> list[list[dict[str, str]]]:
    turns = [
        [{"role": "user", "content": QUESTIONS[0]}],
        [
            {"role": "user", "content": "你好 🚀"},
            {"role": "assistant", "content": "Hi! def f(): pass"},
            {"role": "user", "content": QUESTIONS[2]},
        ],
    ]
    if family != "mistral":
        turns.append([{"role": "system", "content": "Be brief."}, *turns[0]])
    return turns


def test_shapes_and_limits_come_from_the_directory(dirs: dict[str, Path]) -> None:
    cfgs = {f: checkpoint_config(ModelConfig(checkpoint=str(d))) for f, d in dirs.items()}
    for c in cfgs.values():
        assert (c.layers, c.hidden, c.heads, c.kv_heads) == (2, 64, 4, 2)
        assert (c.intermediate, c.vocab_size, c.rms_eps) == (128, VOCAB, 1e-6)
    assert [cfgs[f].max_seq_len for f in FAMILIES] == [256, 512, 128]  # Mistral: its window
    assert cfgs["qwen2"].rope_theta == 1_000_000.0
    tok = tokenizer_for(cfgs["llama"])
    assert isinstance(tok, BPETokenizer)
    assert cfgs["llama"].eos_token == tok.encode("<|eot_id|>")[0]  # the first of the list
    assert open_checkpoint(str(dirs["qwen2"])).tied
    assert not open_checkpoint(str(dirs["llama"])).tied


def test_rope_frequencies_equal_reference(dirs: dict[str, Path]) -> None:
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for f in ("llama", "mistral"):
        ref_cfg = AutoConfig.from_pretrained(dirs[f])
        kind = ref_cfg.rope_parameters["rope_type"]
        theirs, _ = ROPE_INIT_FUNCTIONS[kind](ref_cfg, "cpu")
        cfg = checkpoint_config(ModelConfig(checkpoint=str(dirs[f])))
        mine = rope_inv_freq(16, cfg.rope_theta, rope_scaling(cfg))
        plain = rope_inv_freq(16, cfg.rope_theta, None)
        torch.testing.assert_close(mine.float(), theirs.float(), rtol=1e-6, atol=0)
        assert not torch.allclose(mine, plain), f  # the scaling did something


def test_greedy_ids_equal_reference(dirs: dict[str, Path], family: str, reference) -> None:
    ref_tok, ref_model = reference
    eng = InferenceEngine(ModelConfig(checkpoint=str(dirs[family])), device="cpu")
    tok = BPETokenizer(open_checkpoint(str(dirs[family])))
    params = SamplingParams(GEN_TOKENS, stop_at_eos=False)
    outputs = set()
    for q in QUESTIONS:
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": q}]))
        assert (
            ids
            == ref_tok.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=True, add_generation_prompt=True
            )["input_ids"]
        )
        mine = eng.generate_reference(ids, GEN_TOKENS, sampling=params)
        seq = list(ids)
        with torch.inference_mode():  # greedy, EOS not special: the same for both
            for _ in range(GEN_TOKENS):
                seq.append(int(ref_model(torch.tensor([seq])).logits[0, -1].argmax()))
        theirs = seq[len(ids) :]
        assert mine == theirs, (family, q)
        outputs.add(tuple(mine))
    assert len(outputs) > 1  # the prompts matter: not one degenerate answer


def test_tokenizer_ids_and_chat_template_equal_reference(
    dirs: dict[str, Path], family: str, reference
) -> None:
    ref_tok, _ = reference
    tok = BPETokenizer(open_checkpoint(str(dirs[family])))
    texts = [*CORPUS, "".join(SPECIALS[family][1:]) + " x " + SPECIALS[family][0]]
    texts.append("把这句话翻译成英文：你好，世界！")
    for text in texts:
        assert tok.encode(text) == ref_tok.encode(text, add_special_tokens=False), text
        assert tok.encode(text, add_bos=True) == ref_tok.encode(text), text
        assert tok.decode(tok.encode(text), skip_special=False) == text
    for msgs in _chat(family):
        ref = ref_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        assert tok.apply_chat_template(msgs) == ref
    if family == "mistral":  # the template's raise_exception
        two_users = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        with pytest.raises(ValueError, match="roles must alternate"):
            tok.apply_chat_template(two_users)


def _config_only(src: Path, dst: Path, **changes: Any) -> str:
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text()) | changes
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def test_what_is_refused_is_one_clear_line(dirs: dict[str, Path], tmp_path: Path) -> None:
    def refused(cfg: ModelConfig, match: str) -> None:
        with pytest.raises(CheckpointError, match=match) as e:
            checkpoint_config(cfg)
        assert "\n" not in str(e.value)

    llama = dirs["llama"]
    refused(ModelConfig(checkpoint=str(llama), layers=99), r"model.layers is 99 but .* has 2")
    gpt2 = _config_only(llama, tmp_path / "gpt2", architectures=["GPT2LMHeadModel"])
    refused(ModelConfig(checkpoint=gpt2), "architecture 'GPT2LMHeadModel' is not supported")
    yarn = {"rope_type": "yarn", "rope_theta": 10_000.0, "factor": 4.0}
    bad = _config_only(llama, tmp_path / "yarn", rope_parameters=yarn)
    refused(ModelConfig(checkpoint=bad), "RoPE type 'yarn' is not supported")
    old = {"rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_theta": 500.0}
    bad = _config_only(llama, tmp_path / "old", rope_parameters=None, **old)
    refused(ModelConfig(checkpoint=bad), "RoPE type 'dynamic' is not supported")
    bad = _config_only(llama, tmp_path / "head_dim", head_dim=32)
    refused(ModelConfig(checkpoint=bad), "head_dim 32 .* is not supported")
    bad = _config_only(llama, tmp_path / "mlp_bias", mlp_bias=True)
    refused(ModelConfig(checkpoint=bad), "mlp_bias is not supported")
    bare = _config_only(llama, tmp_path / "no_weights")
    refused(ModelConfig(checkpoint=bare), "no model.safetensors")
    refused(ModelConfig(checkpoint=str(tmp_path)), "has no config.json")


def test_sharded_checkpoint_loads_identically(dirs: dict[str, Path], tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    src = dirs["llama"]
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).save_pretrained(
        sharded, max_shard_size="40KB"
    )
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, sharded / name)
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len([n for n in os.listdir(sharded) if n.endswith(".safetensors")]) > 1
    one = TinyLlama(ModelConfig(checkpoint=str(src))).weights()
    many = TinyLlama(ModelConfig(checkpoint=str(sharded))).weights()
    assert one.keys() == many.keys()
    assert {"layers.1.bq", "layers.1.bo"} <= one.keys()
    for name in one:
        assert torch.equal(one[name], many[name]), name
    stage = TinyLlama(ModelConfig(checkpoint=str(sharded), dtype="bfloat16"), layers=range(1, 2))
    assert stage.weights()["layers.1.wq"].dtype == torch.bfloat16
    assert torch.equal(stage.weights()["layers.1.wq"], one["layers.1.wq"].bfloat16())
