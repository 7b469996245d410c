"""Result records of the engine: small immutable dataclasses, no behaviour."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mooncake_core.worker.kvcache import CacheSnapshot
from mooncake_core.worker.sampling import SamplingParams

__all__ = [
    "EngineSnapshot",
    "EngineStats",
    "LayerKVEvent",
    "LayerKVHook",
    "PrefillResult",
    "SequenceKV",
]


@dataclass(frozen=True, slots=True)
class LayerKVEvent:
    """One layer's new K/V of a prefill, already written into the paged cache.

    Attributes:
        seq_id: the sequence.
        layer: model layer index (layers arrive in order).
        start: position of the first new token.
        end: one past the last new token.
        k: new keys ``[kv_heads, end - start, head_dim]`` (after RoPE); ``v`` the same.
        blocks: block ids covering positions ``[start, end)``; with
            :meth:`PagedKVCache.layer_view` they give the bytes to store layer-wise.
        keys: the chained key of each of ``blocks``, None for the partial last block
            (partial blocks are never stored).
    """

    seq_id: str
    layer: int
    start: int
    end: int
    k: torch.Tensor
    v: torch.Tensor
    blocks: tuple[int, ...]
    keys: tuple[int | None, ...]


LayerKVHook = Callable[[LayerKVEvent], None]


@dataclass(frozen=True, slots=True)
class PrefillResult:
    """Outcome of :meth:`InferenceEngine.prefill`.

    Attributes:
        seq_id: the sequence now holding the prompt's KV (decode it or export it).
        first_token: the sampled first output token.
        logits: float32 logits of the last prompt token ``[vocab]``.
        reused_tokens: prompt tokens whose KV came from the prefix cache.
        computed_tokens: prompt tokens run through the model.
        block_keys: chained keys of the prompt's complete blocks.
    """

    seq_id: str
    first_token: int
    logits: torch.Tensor
    reused_tokens: int
    computed_tokens: int
    block_keys: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SequenceKV:
    """A sequence's KV as bytes, ready to move to another instance.

    Attributes:
        tokens: the tokens whose KV the blocks hold.
        next_token: the sampled token that has no KV yet (decode feeds it next).
        block_keys: chained keys of the complete blocks.
        blocks: ``ceil(len(tokens) / block_size)`` blocks of ``block_nbytes`` bytes.
        sampling: the request's sampling parameters.
        generated: tokens generated so far (``next_token`` is the last of them).
    """

    tokens: tuple[int, ...]
    next_token: int
    block_keys: tuple[int, ...]
    blocks: tuple[bytes, ...]
    sampling: SamplingParams
    generated: tuple[int, ...]


@dataclass(slots=True)
class EngineStats:
    """Running counters (the reuse benchmark and tests read them)."""

    prefills: int = 0
    computed_tokens: int = 0
    reused_tokens: int = 0
    decode_steps: int = 0
    decoded_tokens: int = 0


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Read-model of an engine: counters, live sequences and the cache.

    Attributes:
        location: instance name.
        device: torch device the model runs on.
        sequences: live sequences.
        context_tokens: tokens with KV over all live sequences (decode load).
        prefills, computed_tokens, reused_tokens, decode_steps, decoded_tokens: totals.
        cache: the paged cache's snapshot.
    """

    location: str
    device: str
    sequences: int
    context_tokens: int
    prefills: int
    computed_tokens: int
    reused_tokens: int
    decode_steps: int
    decoded_tokens: int
    cache: CacheSnapshot
