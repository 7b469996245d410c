"""A small Llama-architecture decoder with deterministic weights, or a checkpoint's.

RMSNorm, rotary position embeddings, grouped-query attention and a SwiGLU MLP, sized by
:class:`~mooncake_core.config.models.ModelConfig`. Every weight tensor is drawn from its
own ``torch.Generator`` seeded from ``(config.seed, layer, name)``, on the CPU, so the same
seed gives bit-identical weights in every process, and a pipeline stage can build only
the layers it owns. With ``config.checkpoint`` the weights come from a GGUF file or a
Hugging Face directory (:mod:`~mooncake_core.worker.checkpoint`): then the q/k/v/o
projections may carry biases (Qwen2, Llama ``attention_bias``), added after the
projection, and the RoPE frequencies may be scaled (``linear``, ``llama3``).

The forward pass is split so that every caller composes what it needs::

    tokens --embed--> x --layer a .. layer b-1--> x --head--> logits
                          |  each layer: hook(layer, k_new, v_new) as soon as K/V exist

* full prefill: no past, all layers;
* incremental prefill: ``past(layer)`` returns the cached prefix K/V, only new tokens run;
* a CPP stage: ``layers=range(a, b)``, activations in and out;
* batched decode: ``B`` sequences, one new token each, past padded to the longest with
  ``past_lens`` telling which keys are real.

K is cached after RoPE, so a cached prefix is reusable as-is at the same positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import xxhash

from mooncake_core.config.models import ModelConfig
from mooncake_core.worker.checkpoint import (
    checkpoint_config,
    load_weights,
    rope_inv_freq,
    rope_scaling,
)

__all__ = ["KVPair", "LayerHook", "PastFn", "TinyLlama", "torch_dtype"]

KVPair = tuple[torch.Tensor, torch.Tensor]
"""``(k, v)``, each ``[B, kv_heads, T, head_dim]``."""

LayerHook = Callable[[int, torch.Tensor, torch.Tensor], None]
"""Called as ``hook(layer, k_new, v_new)`` right after a layer's new K/V are computed."""

PastFn = Callable[[int], KVPair | None]
"""Returns a layer's past K/V (``[B, kv_heads, P, head_dim]``), or None when there is none."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """Map a config dtype name to the torch dtype.

    Raises:
        ValueError: an unknown name.
    """
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(_DTYPES)})") from None


def _tensor_seed(seed: int, layer: int, name: str) -> int:
    # One generator per tensor: a stage that owns layers [a, b) draws exactly the same
    # values for them as a process that builds the whole model.
    return xxhash.xxh3_64_intdigest(f"{seed}/{layer}/{name}".encode()) & (2**63 - 1)


def _randn(shape: tuple[int, ...], std: float, seed: int, layer: int, name: str) -> torch.Tensor:
    g = torch.Generator(device="cpu")
    g.manual_seed(_tensor_seed(seed, layer, name))
    return torch.randn(shape, generator=g, dtype=torch.float32) * std


@dataclass(frozen=True, slots=True)
class _Layer:
    attn_norm: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor
    bq: torch.Tensor | None = None
    bk: torch.Tensor | None = None
    bv: torch.Tensor | None = None
    bo: torch.Tensor | None = None
    """Projection biases (a checkpoint's; None: no bias)."""


class TinyLlama:
    """Decoder weights and the forward pass (no KV storage of its own).

    Args:
        config: model sizes, seed and dtype.
        device: torch device for weights and compute (``"cpu"``, ``"cuda"``...).
        layers: the layers to build (default all); a CPP stage builds only its range.

    Raises:
        ValueError: a layer range outside ``[0, config.layers)`` or an odd head dim.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        device: str | torch.device = "cpu",
        layers: range | None = None,
    ) -> None:
        config = checkpoint_config(config)
        owned = range(config.layers) if layers is None else layers
        if owned.step != 1 or len(owned) == 0 or owned.start < 0 or owned.stop > config.layers:
            raise ValueError(f"layer range {owned} is not a non-empty slice of 0..{config.layers}")
        self.config = config
        self.device = torch.device(device)
        self.dtype = torch_dtype(config.dtype)
        self.layers = owned
        self.head_dim = config.hidden // config.heads
        if self.head_dim % 2:
            raise ValueError(f"head dim {self.head_dim} must be even for rotary embeddings")
        d = self.head_dim
        self._layers: dict[int, _Layer] = {}
        self._eps = config.rms_eps
        if config.checkpoint is not None:
            self._load(config, owned)
        else:
            self._random(config, owned)
        inv = rope_inv_freq(d, config.rope_theta, rope_scaling(config))
        ang = torch.arange(config.max_seq_len, dtype=torch.float64)[:, None] * inv[None, :]
        self._cos = torch.cos(ang).to(torch.float32).to(self.device)
        self._sin = torch.sin(ang).to(torch.float32).to(self.device)

    def _load(self, config: ModelConfig, owned: range) -> None:
        w = load_weights(config, owned, self.dtype, self.device)
        self.embedding, self.final_norm, self.lm_head = (
            w["embedding"],
            w["final_norm"],
            w["lm_head"],
        )
        for i in owned:
            fields = {f: w.get(f"layers.{i}.{f}") for f in _Layer.__slots__}
            self._layers[i] = _Layer(**{f: t for f, t in fields.items() if t is not None})

    def _random(self, config: ModelConfig, owned: range) -> None:
        h, d, s = config.hidden, self.head_dim, config.seed

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=self.dtype, device=self.device)

        self.embedding = put(_randn((config.vocab_size, h), 1.0, s, -1, "embed"))
        self.final_norm = put(torch.ones(h))
        self.lm_head = put(_randn((h, config.vocab_size), 1 / math.sqrt(h), s, -1, "lm_head"))
        # Output projections are scaled down so the residual stream stays O(1) at depth.
        out_std = 1 / math.sqrt(2 * config.layers)
        for i in owned:
            qd, kd, inter = config.heads * d, config.kv_heads * d, config.intermediate
            self._layers[i] = _Layer(
                attn_norm=put(torch.ones(h)),
                wq=put(_randn((h, qd), 1 / math.sqrt(h), s, i, "wq")),
                wk=put(_randn((h, kd), 1 / math.sqrt(h), s, i, "wk")),
                wv=put(_randn((h, kd), 1 / math.sqrt(h), s, i, "wv")),
                wo=put(_randn((qd, h), out_std / math.sqrt(qd), s, i, "wo")),
                mlp_norm=put(torch.ones(h)),
                w_gate=put(_randn((h, inter), 1 / math.sqrt(h), s, i, "w_gate")),
                w_up=put(_randn((h, inter), 1 / math.sqrt(h), s, i, "w_up")),
                w_down=put(_randn((inter, h), out_std / math.sqrt(inter), s, i, "w_down")),
            )

    def weights(self) -> dict[str, torch.Tensor]:
        """All weight tensors by name (for comparing two instances)."""
        out = {"embedding": self.embedding, "final_norm": self.final_norm, "lm_head": self.lm_head}
        for i, layer in self._layers.items():
            for f in _Layer.__slots__:
                if (t := getattr(layer, f)) is not None:
                    out[f"layers.{i}.{f}"] = t
        return out

    # ---- pieces -------------------------------------------------------------------------

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids ``[B, n]`` to hidden states ``[B, n, hidden]``.

        Raises:
            ValueError: a token id outside the vocabulary.
        """
        if tokens.numel() and (
            int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size
        ):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), got "
                f"min {int(tokens.min())} max {int(tokens.max())}"
            )
        return self.embedding[tokens.to(self.device)]

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[..., hidden]`` to float32 logits ``[..., vocab]``."""
        return (self._rms(x, self.final_norm) @ self.lm_head).float()

    def run_layers(
        self,
        x: torch.Tensor,
        past_lens: torch.Tensor,
        *,
        layers: range | None = None,
        past: PastFn | None = None,
        hook: LayerHook | None = None,
    ) -> torch.Tensor:
        """Run decoder layers over ``n`` new tokens of ``B`` sequences.

        Args:
            x: hidden states of the new tokens, ``[B, n, hidden]``.
            past_lens: ``[B]`` cached tokens per sequence; new token ``i`` of sequence
                ``b`` sits at position ``past_lens[b] + i``.
            layers: the layers to run, a sub-range of the built ones (default all built).
            past: per-layer past K/V padded to a common length ``P >= max(past_lens)``;
                keys at ``j >= past_lens[b]`` are masked out. None: no past.
            hook: called with each layer's new K/V (``[B, kv_heads, n, head_dim]``).

        Returns:
            The hidden states after the last layer, ``[B, n, hidden]``.

        Raises:
            ValueError: a layer that was not built, or positions past ``max_seq_len``.
        """
        run = self.layers if layers is None else layers
        if run.step != 1 or run.start < self.layers.start or run.stop > self.layers.stop:
            raise ValueError(f"layers {run} are not within the built layers {self.layers}")
        _b, n, _ = x.shape
        past_lens = past_lens.to(self.device, torch.long)
        pos = past_lens[:, None] + torch.arange(n, device=self.device)[None, :]
        if n and int(pos.max()) >= self.config.max_seq_len:
            raise ValueError(
                f"position {int(pos.max())} exceeds max_seq_len {self.config.max_seq_len}"
            )
        cos, sin = self._cos[pos][:, None], self._sin[pos][:, None]  # [B, 1, n, d/2]
        masks: dict[int, torch.Tensor | None] = {}
        for i in run:
            kv = past(i) if past is not None else None
            plen = 0 if kv is None else kv[0].shape[2]
            if plen not in masks:
                masks[plen] = self._mask(past_lens, plen, n) if plen else None
            x = self._layer(self._layers[i], i, x, cos, sin, kv, masks[plen], hook)
        return x

    # ---- internals ----------------------------------------------------------------------

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self._eps)
        return xf.to(x.dtype) * w

    @staticmethod
    def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        y = x @ w
        return y if b is None else y + b

    @staticmethod
    def _rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        tf = t.float()
        half = tf.shape[-1] // 2
        a, b = tf[..., :half], tf[..., half:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(t.dtype)

    def _mask(self, past_lens: torch.Tensor, plen: int, n: int) -> torch.Tensor:
        # True where query i of sequence b may attend key j: real past keys, and new keys
        # up to and including itself (causal).
        dev = self.device
        j = torch.arange(plen, device=dev)
        past_ok = j[None, None, :] < past_lens[:, None, None]  # [B, 1, P]
        causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
        b = past_lens.shape[0]
        both = (past_ok.expand(b, n, plen), causal[None].expand(b, n, n))
        return torch.cat(both, dim=2)[:, None]  # [B, 1, n, P+n], broadcast over heads

    def _layer(
        self,
        w: _Layer,
        index: int,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past: KVPair | None,
        mask: torch.Tensor | None,
        hook: LayerHook | None,
    ) -> torch.Tensor:
        cfg, d = self.config, self.head_dim
        b, n, _ = x.shape
        h = self._rms(x, w.attn_norm)
        q = self._linear(h, w.wq, w.bq).view(b, n, cfg.heads, d).transpose(1, 2)
        k = self._linear(h, w.wk, w.bk).view(b, n, cfg.kv_heads, d).transpose(1, 2)
        v = self._linear(h, w.wv, w.bv).view(b, n, cfg.kv_heads, d).transpose(1, 2)
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        k, v = k.contiguous(), v.contiguous()
        if hook is not None:
            hook(index, k, v)
        if past is not None:
            k_all = torch.cat((past[0].to(k.dtype), k), dim=2)
            v_all = torch.cat((past[1].to(v.dtype), v), dim=2)
        else:
            k_all, v_all = k, v
        # Grouped-query attention; SDPA picks a fused kernel and never copies K/V per
        # query head. Without a past the mask is plain causal (the fast path).
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if mask is None:
            out = sdpa(q.float(), k_all.float(), v_all.float(), is_causal=True, enable_gqa=True)
        else:
            out = sdpa(q.float(), k_all.float(), v_all.float(), attn_mask=mask, enable_gqa=True)
        att = out.transpose(1, 2).reshape(b, n, cfg.heads * d).to(x.dtype)
        x = x + self._linear(att, w.wo, w.bo)
        h = self._rms(x, w.mlp_norm)
        act = torch.nn.functional.silu(h @ w.w_gate) * (h @ w.w_up)
        return x + act @ w.w_down


def as_token_tensor(tokens: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Token ids as a 1-D long tensor on the CPU."""
    if isinstance(tokens, torch.Tensor):
        return tokens.to("cpu", torch.long).reshape(-1)
    return torch.tensor(list(tokens), dtype=torch.long)
