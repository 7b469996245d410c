"""Chunked pipeline parallelism (CPP), in-process form.

A prefill group of ``N`` stages; stage ``j`` owns the contiguous layer range
``[a_j, b_j)`` and the KV of those layers. A prompt longer than ``threshold`` new
tokens is cut into chunks of ``chunk_tokens`` that flow through the stages like
micro-batches; stage ``j`` works on chunk ``c`` at tick ``c + j``::

    tick:      0    1    2    3
    stage 0:  c0   c1   c2
    stage 1:       c0   c1   c2

Only activations (``[n, hidden]`` tensors) cross stage boundaries; a chunk's attention
reads the KV of the earlier chunks that the same stage already holds. Short prompts do
not pay the pipeline: they run on one stage that owns every layer (:attr:`solo`; in
the cross-process form any node of the group, which keeps the full weights, serves them).

:class:`PipelineStage` is the unit that will run in its own process: its inputs and
outputs are plain tensors and its state is its own paged cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker.checkpoint import checkpoint_config
from mooncake_core.worker.kvcache import PagedKVCache
from mooncake_core.worker.model import KVPair, TinyLlama, as_token_tensor
from mooncake_core.worker.results import SequenceKV
from mooncake_core.worker.sampling import Sampler, SamplingParams

__all__ = ["CppOptions", "CppPrefillGroup", "CppResult", "PipelineStage", "split_layers"]


def split_layers(layers: int, stages: int) -> list[range]:
    """Cut ``layers`` into ``stages`` contiguous ranges, earlier stages one larger if uneven.

    Raises:
        ValueError: fewer layers than stages, or ``stages < 1``.
    """
    if stages < 1 or stages > layers:
        raise ValueError(f"cannot split {layers} layers over {stages} stages")
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for j in range(stages):
        n = base + (1 if j < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


class PipelineStage:
    """One CPP stage: the weights and paged KV of a contiguous layer range.

    Args:
        model: model config (the full model; the stage builds only its layers).
        layers: the owned range ``[a, b)``.
        hashing: block size and hash seed.
        num_blocks: capacity of the stage's paged cache.
        device: torch device.
        name: instance name for cache events.
    """

    def __init__(
        self,
        model: ModelConfig,
        layers: range,
        hashing: HashingConfig,
        *,
        num_blocks: int = 256,
        device: str | torch.device = "cpu",
        name: str = "stage",
    ) -> None:
        model = checkpoint_config(model)
        self.layers = layers
        self.model = TinyLlama(model, device=device, layers=layers)
        self.cache = PagedKVCache(
            model, hashing, num_blocks, layers=layers, device=self.model.device, location=name
        )
        self.first = layers.start == 0
        self.last = layers.stop == model.layers

    @property
    def object_range(self) -> tuple[int, int]:
        """``(offset, length)`` of this stage's layers inside a full block's bytes.

        A stage fetching a prefix block from the Store reads only this range of the
        object (layers are outermost inside a block, so the range is contiguous).
        """
        return self.layers.start * self.cache.layer_nbytes, self.cache.block_nbytes

    def begin(self, seq_id: str, keys: Sequence[int], use_blocks: int, total_tokens: int) -> int:
        """Open a sequence, reusing cached prefix blocks, and reserve its slots.

        Returns:
            Reused tokens.

        Raises:
            CacheFullError: no room (the sequence is not left open).
        """
        reused = self.cache.create_sequence(seq_id, keys, use_blocks)
        try:
            self.cache.reserve(seq_id, total_tokens)
        except BaseException:
            self.cache.free(seq_id)
            raise
        return reused

    @torch.inference_mode()
    def forward(self, seq_id: str, start: int, inputs: torch.Tensor) -> torch.Tensor:
        """Run the owned layers over one chunk.

        Args:
            seq_id: an open sequence.
            start: position of the chunk's first token (KV of ``[0, start)`` is here).
            inputs: token ids ``[n]`` on the first stage, activations ``[n, hidden]`` after.

        Returns:
            Activations ``[n, hidden]``; on the last stage, float32 logits of the chunk's
            last token ``[vocab]``.
        """
        if self.first:
            x = self.model.embed(inputs.reshape(1, -1).to(self.model.device))
        else:
            x = inputs.reshape(1, inputs.shape[-2], -1).to(self.model.device, self.model.dtype)

        def past(layer: int) -> KVPair | None:
            return self.cache.gather([seq_id], layer, start) if start else None

        def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.cache.write([seq_id], layer, [start], k, v)

        h = self.model.run_layers(x, torch.tensor([start]), past=past, hook=hook)
        if self.last:
            return self.model.head(h[0, -1])
        return h[0]

    def finish(self, seq_id: str, length: int, keys: Sequence[int]) -> None:
        """Record ``length`` tokens of KV and cache the complete blocks."""
        self.cache.commit(seq_id, length, keys)

    def release(self, seq_id: str) -> None:
        """Drop the sequence; complete blocks stay cached."""
        self.cache.free(seq_id)


@dataclass(frozen=True, slots=True)
class CppOptions:
    """CPP group shape (not in mooncake.yaml yet).

    Attributes:
        stages: pipeline stages (nodes in the group).
        chunk_tokens: tokens per chunk.
        threshold: prompts with more new tokens than this are pipelined; others run solo.

    Raises:
        ValueError: a non-positive value.
    """

    stages: int = 2
    chunk_tokens: int = 1024
    threshold: int = 1024

    def __post_init__(self) -> None:
        for name in ("stages", "chunk_tokens", "threshold"):
            if getattr(self, name) < 1:
                raise ValueError(f"CppOptions.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class CppResult:
    """Outcome of a group prefill.

    Attributes:
        seq_id: the sequence (open on every stage that ran it).
        logits: float32 logits of the last prompt token.
        reused_tokens: prefix tokens taken from the stages' caches.
        computed_tokens: tokens run through the model.
        chunks: chunk boundaries ``(start, end)``.
        schedule: ``(tick, stage, chunk)`` in execution order (``stage`` -1 is solo).
    """

    seq_id: str
    logits: torch.Tensor
    reused_tokens: int
    computed_tokens: int
    chunks: tuple[tuple[int, int], ...]
    schedule: tuple[tuple[int, int, int], ...]

    @property
    def pipelined(self) -> bool:
        """Whether the prompt went through the pipeline rather than the solo stage."""
        return bool(self.schedule) and self.schedule[0][1] >= 0


class CppPrefillGroup:
    """A prefill group: ``N`` layer-range stages plus the solo path for short prompts.

    Args:
        model: model config.
        hashing: block size and hash seed.
        options: stages, chunk size and threshold.
        num_blocks: paged cache capacity of each stage.
        device: torch device.
    """

    def __init__(
        self,
        model: ModelConfig,
        hashing: HashingConfig,
        options: CppOptions | None = None,
        *,
        num_blocks: int = 256,
        device: str | torch.device = "cpu",
    ) -> None:
        self.options = options or CppOptions()
        self.config = model
        self.hasher = BlockHasher(hashing)
        self.stages = [
            PipelineStage(model, r, hashing, num_blocks=num_blocks, device=device, name=f"stage{j}")
            for j, r in enumerate(split_layers(model.layers, self.options.stages))
        ]
        self.solo = PipelineStage(
            model, range(model.layers), hashing, num_blocks=num_blocks, device=device, name="solo"
        )
        self._ids = itertools.count()
        self._where: dict[str, list[PipelineStage]] = {}
        self._tokens: dict[str, tuple[int, ...]] = {}

    def prefill(self, tokens: Sequence[int], *, seq_id: str | None = None) -> CppResult:
        """Prefill ``tokens`` through the pipeline (long) or the solo stage (short).

        Raises:
            ValueError: an empty prompt or a duplicate id; CacheFullError: no room.
        """
        if not tokens:
            raise ValueError("prompt must have at least one token")
        sid = seq_id or f"cpp-{next(self._ids)}"
        if sid in self._where:
            raise ValueError(f"sequence {sid!r} already exists")
        ids = as_token_tensor(tokens)
        keys = self.hasher.block_keys(ids.tolist())
        usable = (len(ids) - 1) // self.hasher.block_size
        # Decide on the new-token count after the best reuse any path could give.
        pipe_hit = min(st.cache.match(keys[:usable]) for st in self.stages)
        solo_hit = self.solo.cache.match(keys[:usable])
        bs = self.hasher.block_size
        pipelined = len(ids) - pipe_hit * bs > self.options.threshold
        group = self.stages if pipelined else [self.solo]
        use = pipe_hit if pipelined else solo_hit
        opened: list[PipelineStage] = []
        try:
            reused = 0
            for st in group:
                reused = st.begin(sid, keys, use, len(ids))
                opened.append(st)
            step = self.options.chunk_tokens if pipelined else len(ids)
            chunks = [(s, min(s + step, len(ids))) for s in range(reused, len(ids), step)]
            schedule: list[tuple[int, int, int]] = []
            acts: dict[tuple[int, int], torch.Tensor] = {}
            logits = torch.empty(0)
            for tick in range(len(chunks) + len(group) - 1):
                for j, st in enumerate(group):
                    c = tick - j
                    if not 0 <= c < len(chunks):
                        continue
                    s, e = chunks[c]
                    inp = ids[s:e] if j == 0 else acts.pop((j - 1, c))
                    out = st.forward(sid, s, inp)
                    schedule.append((tick, j if pipelined else -1, c))
                    if st.last:
                        logits = out
                    else:
                        acts[(j, c)] = out
            for st in group:
                st.finish(sid, len(ids), keys)
        except BaseException:
            for st in opened:
                st.release(sid)
            raise
        self._where[sid] = group
        self._tokens[sid] = tuple(ids.tolist())
        return CppResult(sid, logits, reused, len(ids) - reused, tuple(chunks), tuple(schedule))

    def block_bytes(self, seq_id: str) -> list[bytes]:
        """The sequence's blocks in the full-model layout (stage slices joined by layer).

        Raises:
            KeyError: unknown sequence.
        """
        group = self._group(seq_id)
        tables = [st.cache.block_table(seq_id) for st in group]
        return [
            b"".join(st.cache.read_block(t[i]) for st, t in zip(group, tables, strict=True))
            for i in range(len(tables[0]))
        ]

    def export_kv(self, result: CppResult, sampling: SamplingParams | None = None) -> SequenceKV:
        """Sample the first token and package the KV for a decode instance.

        Args:
            result: a prefill of this group whose sequence is still open.
            sampling: the request's sampling (default greedy).

        Returns:
            A :class:`SequenceKV` that :meth:`InferenceEngine.import_kv` accepts.

        Raises:
            KeyError: the sequence is not open here.
        """
        params = sampling or SamplingParams()
        first = Sampler(params)(result.logits)
        group = self._group(result.seq_id)
        length = group[0].cache.length(result.seq_id)
        tokens = self._tokens[result.seq_id]
        return SequenceKV(
            tokens=tokens,
            next_token=first,
            block_keys=tuple(self.hasher.block_keys(list(tokens))),
            blocks=tuple(self.block_bytes(result.seq_id)[: -(-length // self.hasher.block_size)]),
            sampling=params,
            generated=(first,),
        )

    def release(self, seq_id: str) -> None:
        """Drop the sequence on every stage that holds it.

        Raises:
            KeyError: unknown sequence.
        """
        for st in self._group(seq_id):
            st.release(seq_id)
        del self._where[seq_id]
        del self._tokens[seq_id]

    def _group(self, seq_id: str) -> list[PipelineStage]:
        try:
            return self._where[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None
