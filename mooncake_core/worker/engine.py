"""In-process inference engine: prefill with prefix reuse, batched decode, generation.

This is the compute core that the prefill and decode worker processes wrap. It owns a
:class:`TinyLlama` and a :class:`PagedKVCache` and nothing else: no sockets, no threads.

Request life in one engine::

    prefill(tokens)      reuse cached prefix blocks, compute the rest, sample token 1
      -> export_kv()     block bytes for the decode instance (P/D)   -> import_kv()
    decode_step([...])   one token for each of B sequences (continuous batching)
    release(seq_id)      complete blocks stay in the prefix cache (LRU)

:meth:`InferenceEngine.generate_reference` is the independent single-sequence path
(contiguous K/V, no paging, no prefix cache) that every other path is checked against.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from mooncake_core.conductor.events import CacheEvent
from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker.checkpoint import checkpoint_config
from mooncake_core.worker.kvcache import PagedKVCache
from mooncake_core.worker.model import KVPair, TinyLlama, as_token_tensor
from mooncake_core.worker.results import (
    EngineSnapshot,
    EngineStats,
    LayerKVEvent,
    LayerKVHook,
    PrefillResult,
    SequenceKV,
)
from mooncake_core.worker.sampling import Sampler, SamplingParams

__all__ = ["InferenceEngine"]


@dataclass(slots=True)
class _Seq:
    tokens: list[int]  # tokens with KV in the cache
    keys: list[int]  # chained keys of the complete blocks of ``tokens``
    pending: int  # sampled, KV not computed yet
    sampler: Sampler
    generated: list[int] = field(default_factory=list)


class InferenceEngine:
    """Model + paged KV cache + sampling for one worker instance.

    Args:
        model: model sizes and seed.
        hashing: block size and hash seed (shared with the conductor and store).
        num_blocks: paged cache capacity in blocks.
        device: ``"cpu"``, ``"cuda"``; default ``cuda`` when available.
        location: instance name for cache events.
        weights: an existing model to share (must match ``model``).
    """

    def __init__(
        self,
        model: ModelConfig | None = None,
        hashing: HashingConfig | None = None,
        *,
        num_blocks: int = 256,
        device: str | None = None,
        location: str = "worker",
        weights: TinyLlama | None = None,
    ) -> None:
        self.config = checkpoint_config(model or ModelConfig())
        self.hashing = hashing or HashingConfig()
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = weights or TinyLlama(self.config, device=dev)
        self.device = self.model.device
        self.hasher = BlockHasher(self.hashing)
        self.cache = PagedKVCache(
            self.config, self.hashing, num_blocks, device=self.device, location=location
        )
        self.stats = EngineStats()
        self._seqs: dict[str, _Seq] = {}
        self._pending_kv: dict[str, int] = {}  # reserved by reserve_kv, not adopted yet
        self._ids = itertools.count()

    # ---- prefill ------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(
        self,
        tokens: Sequence[int],
        *,
        seq_id: str | None = None,
        cached_blocks: Mapping[int, bytes | memoryview | torch.Tensor] | None = None,
        use_prefix_cache: bool = True,
        layer_hook: LayerKVHook | None = None,
        sampling: SamplingParams | None = None,
    ) -> PrefillResult:
        """Prefill a prompt, computing only the tokens not covered by a cached prefix.

        Args:
            tokens: prompt token ids (at least one).
            seq_id: id for the new sequence (default a fresh one).
            cached_blocks: prefix blocks fetched from the Store, by chained key; the
                leading ones are imported into the prefix cache before matching.
            use_prefix_cache: False computes every token (the cold baseline).
            layer_hook: called once per layer, in order, as soon as that layer's new K/V
                are in the paged cache (layer-wise store).
            sampling: how to pick tokens (default greedy, 16 tokens).

        Returns:
            The sequence id, first token and reuse counts.

        Raises:
            ValueError: an empty prompt, a bad token id, a duplicate ``seq_id`` or a
                prompt longer than ``max_seq_len``; CacheFullError: no room.
        """
        if not tokens:
            raise ValueError("prompt must have at least one token")
        if len(tokens) >= self.config.max_seq_len:
            raise ValueError(
                f"prompt of {len(tokens)} tokens does not fit max_seq_len {self.config.max_seq_len}"
            )
        sid = self._new_id(seq_id)
        ids = as_token_tensor(tokens)
        vocab = self.config.vocab_size
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"token ids must be in [0, {vocab}), got {ids.min()}..{ids.max()}")
        keys = self.hasher.block_keys(ids.tolist())
        if cached_blocks:
            for k in keys:
                if k not in cached_blocks:
                    break
                self.cache.import_block(k, cached_blocks[k])
        bs = self.hashing.block_size
        # The last prompt token is always computed: its logits give the first token.
        usable = (len(tokens) - 1) // bs if use_prefix_cache else 0
        reused = self.cache.create_sequence(sid, keys, usable)
        new = ids[reused:]
        hook = self._prefill_hook(sid, reused, reused + len(new), keys, layer_hook)

        def past(layer: int) -> KVPair | None:
            return self.cache.gather([sid], layer, reused) if reused else None

        try:
            self.cache.reserve(sid, len(tokens))
            x = self.model.embed(new[None].to(self.device))
            lens = torch.tensor([reused], dtype=torch.long)
            h = self.model.run_layers(x, lens, past=past, hook=hook)
            logits = self.model.head(h[0, -1])
        except BaseException:
            # Nothing was committed: the sequence's blocks go back as they were.
            self.cache.free(sid)
            raise
        self.cache.commit(sid, len(tokens), keys)
        sampler = Sampler(sampling or SamplingParams())
        first = sampler(logits)
        self._seqs[sid] = _Seq(list(ids.tolist()), list(keys), first, sampler, [first])
        self.stats.prefills += 1
        self.stats.computed_tokens += len(new)
        self.stats.reused_tokens += reused
        return PrefillResult(sid, first, logits, reused, len(new), tuple(keys))

    def _prefill_hook(
        self, sid: str, start: int, end: int, keys: Sequence[int], user: LayerKVHook | None
    ) -> Callable[[int, torch.Tensor, torch.Tensor], None]:
        first, stop = start // self.hashing.block_size, -(-end // self.hashing.block_size)
        names = tuple(keys[i] if i < len(keys) else None for i in range(first, stop))

        def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.cache.write([sid], layer, [start], k, v)
            if user is not None:
                blocks = self.cache.block_table(sid)[first:stop]
                user(LayerKVEvent(sid, layer, start, end, k[0], v[0], blocks, names))

        return hook

    # ---- decode -------------------------------------------------------------------------

    @torch.inference_mode()
    def decode_step(self, seq_ids: Sequence[str]) -> dict[str, int]:
        """Run one decode step for a batch of sequences of any lengths.

        Each sequence feeds its pending token and samples the next one.

        Args:
            seq_ids: distinct live sequences.

        Returns:
            The new token of each sequence.

        Raises:
            KeyError: an unknown sequence; ValueError: duplicates or a sequence at
                ``max_seq_len``; CacheFullError: no block for a new token.
        """
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"duplicate sequence ids in decode batch: {list(seq_ids)}")
        if not seq_ids:
            return {}
        seqs = [self._seq(s) for s in seq_ids]
        lens = [len(s.tokens) for s in seqs]
        for sid, n in zip(seq_ids, lens, strict=True):
            if n + 1 >= self.config.max_seq_len:
                raise ValueError(f"sequence {sid!r} reached max_seq_len {self.config.max_seq_len}")
            self.cache.reserve(sid, n + 1)
        upto = max(lens)
        ids = list(seq_ids)

        def past(layer: int) -> KVPair:
            return self.cache.gather(ids, layer, upto)

        def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.cache.write(ids, layer, lens, k, v)

        toks = torch.tensor([[s.pending] for s in seqs], dtype=torch.long, device=self.device)
        h = self.model.run_layers(
            self.model.embed(toks), torch.tensor(lens, dtype=torch.long), past=past, hook=hook
        )
        logits = self.model.head(h[:, 0])
        out: dict[str, int] = {}
        bs = self.hashing.block_size
        for i, (sid, s) in enumerate(zip(ids, seqs, strict=True)):
            s.tokens.append(s.pending)
            if len(s.tokens) % bs == 0:
                blk = s.tokens[-bs:]
                local = self.hasher.local_hash(blk)
                s.keys.append(self.hasher.chain(s.keys[-1], local) if s.keys else local)
            self.cache.commit(sid, len(s.tokens), s.keys)
            s.pending = s.sampler(logits[i])
            s.generated.append(s.pending)
            out[sid] = s.pending
        self.stats.decode_steps += 1
        self.stats.decoded_tokens += len(ids)
        return out

    def release(self, seq_id: str) -> None:
        """Drop a sequence; its complete blocks stay in the prefix cache.

        Raises:
            KeyError: unknown sequence.
        """
        self._seq(seq_id)
        del self._seqs[seq_id]
        self.cache.free(seq_id)

    def generated(self, seq_id: str) -> list[int]:
        """Tokens generated so far for ``seq_id`` (a copy)."""
        return list(self._seq(seq_id).generated)

    def finished(self, seq_id: str) -> bool:
        """Whether ``seq_id`` has produced ``max_tokens`` or stopped at EOS."""
        s = self._seq(seq_id)
        p = s.sampler.params
        eos = self.config.eos_token
        return len(s.generated) >= p.max_tokens or (p.stop_at_eos and s.generated[-1] == eos)

    # ---- moving KV between instances ----------------------------------------------------

    def export_kv(self, seq_id: str) -> SequenceKV:
        """Copy a sequence's KV blocks out as bytes (for streaming to a decode instance).

        Raises:
            KeyError: unknown sequence.
        """
        s = self._seq(seq_id)
        blocks = tuple(self.cache.read_block(b) for b in self.cache.block_table(seq_id))
        n = -(-len(s.tokens) // self.hashing.block_size)
        return SequenceKV(
            tuple(s.tokens),
            s.pending,
            tuple(s.keys),
            blocks[:n],
            s.sampler.params,
            tuple(s.generated),
        )

    def import_kv(self, kv: SequenceKV, *, seq_id: str | None = None) -> str:
        """Adopt a sequence exported by another engine; decode continues where it stopped.

        The sampler is re-created from ``kv.sampling``: greedy decoding continues
        exactly; a seeded temperature stream restarts from its seed.

        Returns:
            The new sequence id.

        Raises:
            ValueError: block count or size mismatch, duplicate id; CacheFullError.
        """
        need = -(-len(kv.tokens) // self.hashing.block_size)
        if len(kv.blocks) != need:
            raise ValueError(f"{len(kv.tokens)} tokens need {need} blocks, got {len(kv.blocks)}")
        sid, blocks = self.reserve_kv(len(kv.tokens), seq_id=seq_id)
        try:
            for b, data in zip(blocks, kv.blocks, strict=True):
                self.cache.write_block(b, data)
        except BaseException:
            self.abort_kv(sid)
            raise
        self.adopt_kv(sid, kv.tokens, kv.next_token, kv.sampling, generated=kv.generated)
        return sid

    def reserve_kv(
        self, num_tokens: int, *, seq_id: str | None = None, max_tokens: int = 0
    ) -> tuple[str, tuple[int, ...]]:
        """Reserve blocks for KV that a transport will write in place (decode side, zero copy).

        Write each block's bytes through ``cache.block_view(block)`` (or the registered
        pool at ``block * cache.block_nbytes``), then call :meth:`adopt_kv`, or
        :meth:`abort_kv` if the transfer failed.

        With ``max_tokens``, the blocks the sequence's decode will need are reserved now
        too: generating ``max_tokens`` tokens writes KV for ``max_tokens - 1`` of them
        (the last one is sampled, never fed back), so :meth:`decode_step` never has to
        find a block later, and a full pool refuses the request here, before any work.

        Args:
            num_tokens: tokens whose KV the transport writes.
            seq_id: id for the sequence (default a fresh one).
            max_tokens: tokens the request may generate (0: reserve the prompt only).

        Returns:
            The sequence id and the ``ceil(num_tokens / block_size)`` block ids the
            transport writes, in order (the decode headroom is not listed).

        Raises:
            ValueError: ``num_tokens < 1``, a duplicate id, or ``num_tokens + max_tokens``
                beyond ``max_seq_len`` (decode would stop short of ``max_tokens``);
                CacheFullError: no room.
        """
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        limit = self.config.max_seq_len
        if max_tokens and num_tokens + max_tokens > limit:
            raise ValueError(
                f"prompt of {num_tokens} tokens plus max_tokens {max_tokens} does not fit "
                f"max_seq_len {limit}"
            )
        sid = self._new_id(seq_id)
        self.cache.create_sequence(sid)
        try:
            self.cache.reserve(sid, num_tokens + max(max_tokens - 1, 0))
        except BaseException:
            self.cache.free(sid)
            raise
        self._pending_kv[sid] = num_tokens
        return sid, self.cache.block_table(sid)[: -(-num_tokens // self.hashing.block_size)]

    def adopt_kv(
        self,
        seq_id: str,
        tokens: Sequence[int],
        next_token: int,
        sampling: SamplingParams,
        *,
        generated: Sequence[int] | None = None,
    ) -> None:
        """Turn a reserved sequence whose blocks now hold the KV of ``tokens`` into a live one.

        Args:
            seq_id: from :meth:`reserve_kv`.
            tokens: the tokens whose KV the blocks hold.
            next_token: the sampled token without KV (decode feeds it next).
            sampling: the request's sampling parameters.
            generated: tokens generated so far (default ``[next_token]``).

        Raises:
            KeyError: not a reserved sequence; ValueError: ``tokens`` length differs
                from the reservation.
        """
        want = self._pending_kv.get(seq_id)
        if want is None:
            raise KeyError(f"no reserved KV for sequence {seq_id!r}")
        if len(tokens) != want:
            raise ValueError(f"reserved {want} tokens for {seq_id!r}, adopting {len(tokens)}")
        keys = self.hasher.block_keys(list(tokens))
        del self._pending_kv[seq_id]
        self.cache.commit(seq_id, len(tokens), keys)
        gen = list(generated) if generated is not None else [next_token]
        self._seqs[seq_id] = _Seq(list(tokens), keys, next_token, Sampler(sampling), gen)

    def abort_kv(self, seq_id: str) -> None:
        """Give back the blocks of a reservation whose transfer failed.

        Raises:
            KeyError: not a reserved sequence.
        """
        if self._pending_kv.pop(seq_id, None) is None:
            raise KeyError(f"no reserved KV for sequence {seq_id!r}")
        self.cache.free(seq_id)

    # ---- whole requests -----------------------------------------------------------------

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *, max_batch: int = 8
    ) -> list[list[int]]:
        """Generate for many prompts with continuous batching through the prefix cache.

        A waiting prompt is prefilled as soon as the running batch has room; finished
        sequences leave the batch after every step.

        Args:
            prompts: token ids per prompt.
            sampling: the same parameters for every prompt.
            max_batch: most sequences decoding at once.

        Returns:
            Generated tokens per prompt, in input order.

        Raises:
            ValueError: ``max_batch < 1``; errors of :meth:`prefill`/:meth:`decode_step`.
        """
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        waiting = deque(enumerate(prompts))
        running: dict[str, int] = {}
        out: list[list[int]] = [[] for _ in prompts]
        while waiting or running:
            while waiting and len(running) < max_batch:
                i, p = waiting.popleft()
                r = self.prefill(p, sampling=sampling)
                running[r.seq_id] = i
                self._retire_if_done(r.seq_id, running, out)
            if running:
                self.decode_step(list(running))
                for sid in list(running):
                    self._retire_if_done(sid, running, out)
        return out

    def _retire_if_done(self, sid: str, running: dict[str, int], out: list[list[int]]) -> None:
        if self.finished(sid):
            out[running.pop(sid)] = self.generated(sid)
            self.release(sid)

    @torch.inference_mode()
    def generate_reference(
        self,
        prompt_tokens: Sequence[int],
        max_tokens: int,
        *,
        sampling: SamplingParams | None = None,
    ) -> list[int]:
        """Single-sequence reference generation: contiguous K/V, no paging, no cache.

        Args:
            prompt_tokens: prompt token ids.
            max_tokens: tokens to generate (overrides ``sampling.max_tokens``).
            sampling: temperature, seed and EOS handling (default greedy).

        Returns:
            The generated tokens (stops early after EOS when ``stop_at_eos``).
        """
        base = sampling or SamplingParams()
        params = SamplingParams(max_tokens, base.temperature, base.seed, base.stop_at_eos)
        sampler = Sampler(params)
        kv: dict[int, KVPair] = {}

        def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            old = kv.get(layer)
            kv[layer] = (
                (k, v) if old is None else (torch.cat((old[0], k), 2), torch.cat((old[1], v), 2))
            )

        ids = as_token_tensor(prompt_tokens)[None].to(self.device)
        pos = 0
        out: list[int] = []
        while True:
            # past(layer) is read before the layer's hook appends the new K/V.
            h = self.model.run_layers(
                self.model.embed(ids), torch.tensor([pos], dtype=torch.long), past=kv.get, hook=hook
            )
            pos += ids.shape[1]
            tok = sampler(self.model.head(h[0, -1]))
            out.append(tok)
            if len(out) >= max_tokens or (params.stop_at_eos and tok == self.config.eos_token):
                return out
            ids = torch.tensor([[tok]], dtype=torch.long, device=self.device)

    # ---- misc ---------------------------------------------------------------------------

    def take_events(self) -> list[CacheEvent]:
        """Cache events (tier HBM) for the conductor's index, oldest first."""
        return self.cache.take_events()

    def snapshot(self) -> EngineSnapshot:
        """Counters, load and cache state in one immutable record."""
        st = self.stats
        return EngineSnapshot(
            location=self.cache.location,
            device=str(self.device),
            sequences=len(self._seqs),
            context_tokens=sum(len(s.tokens) for s in self._seqs.values()),
            prefills=st.prefills,
            computed_tokens=st.computed_tokens,
            reused_tokens=st.reused_tokens,
            decode_steps=st.decode_steps,
            decoded_tokens=st.decoded_tokens,
            cache=self.cache.snapshot(),
        )

    def sequences(self) -> tuple[str, ...]:
        """Ids of live sequences."""
        return tuple(self._seqs)

    def _seq(self, seq_id: str) -> _Seq:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None

    def _new_id(self, seq_id: str | None) -> str:
        if seq_id is None:
            while True:
                seq_id = f"seq-{next(self._ids)}"
                if seq_id not in self._seqs and seq_id not in self._pending_kv:
                    return seq_id
        if seq_id in self._seqs or seq_id in self._pending_kv:
            raise ValueError(f"sequence {seq_id!r} already exists")
        return seq_id
