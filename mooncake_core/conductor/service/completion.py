"""A completion request, its chunks, and the sans-IO pieces of the front door's steps.

:class:`~mooncake_core.conductor.service.frontdoor.FrontDoor` does the IO (RPCs, the
Conductor's hooks, the audit); what it computes on the way is here, tested without
workers (``tests/unit/serving/test_frontdoor_steps.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mooncake_core.conductor.calibration import PrefillTimings
from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.worker.bpe_tokenizer import IncrementalDecoder, TextTokenizer

if TYPE_CHECKING:
    from mooncake_core.conductor.decision import Decision

__all__ = [
    "ChunkBuilder",
    "CompletionChunk",
    "CompletionRequest",
    "fetch_keys",
    "first_is_last",
    "prefill_request",
    "prompt_tokens",
    "sampling_of",
    "tbt_of",
    "timings_of",
]


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """One completion request.

    Attributes:
        prompt: text (tokenized with the byte tokenizer, BOS first), or None.
        token_ids: token ids instead of text.
        max_tokens: tokens to generate (the first comes from prefill).
        temperature: 0 is greedy.
        seed: sampling seed (temperature > 0).
        stop_at_eos: stop after EOS.
        top_p: nucleus sampling mass, in ``(0, 1]`` (temperature > 0).

    Raises:
        ValueError: neither or both of prompt/token_ids, an empty prompt, bad numbers.
    """

    prompt: str | None = None
    token_ids: tuple[int, ...] | None = None
    max_tokens: int = 16
    temperature: float = 0.0
    seed: int = 0
    stop_at_eos: bool = False
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.token_ids is None):
            raise ValueError("give exactly one of prompt and token_ids")
        if self.token_ids is not None and not self.token_ids:
            raise ValueError("token_ids must not be empty")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not (0.0 <= self.temperature < math.inf):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True, slots=True)
class CompletionChunk:
    """One generated token as the client sees it.

    Attributes:
        request_id: the request.
        token: token id; text: its bytes decoded (may be empty mid-character).
        index: position among generated tokens.
        finished: last token of the request.
        prefill: the prefill instance; decode: the decode instance.
        ttft_s: set on the first chunk; tbt_s, reused_tokens, computed_tokens: on the last.
    """

    request_id: str
    token: int
    text: str
    index: int
    finished: bool
    prefill: str
    decode: str
    ttft_s: float | None = None
    tbt_s: float | None = None
    reused_tokens: int | None = None
    computed_tokens: int | None = None


def tbt_of(times: Sequence[float]) -> float | None:
    """TBT of one request: the mean of the worst 10% token intervals (at least one).

    Args:
        times: arrival time of each generated token, in order.
    """
    gaps = sorted((b - a for a, b in itertools.pairwise(times)), reverse=True)
    if not gaps:
        return None
    k = max(1, len(gaps) // 10)
    return sum(gaps[:k]) / k


def prompt_tokens(
    req: CompletionRequest, tokenizer: TextTokenizer, vocab_size: int, max_seq_len: int | None
) -> list[int]:
    """The request's token ids (its text tokenized, BOS first), checked against the model.

    Raises:
        ValueError: a token id outside ``[0, vocab_size)``, or prompt + ``max_tokens``
            longer than ``max_seq_len`` (it could never fit: refused now, not after
            decoding).
    """
    if req.token_ids is not None:
        tokens = list(req.token_ids)
    else:
        tokens = tokenizer.encode(req.prompt or "")
    if any(not 0 <= t < vocab_size for t in tokens):
        raise ValueError(f"token ids must be in [0, {vocab_size})")
    if max_seq_len is not None and len(tokens) + req.max_tokens > max_seq_len:
        raise ValueError(
            f"prompt ({len(tokens)} tokens) + max_tokens ({req.max_tokens}) exceeds"
            f" the model's max_seq_len ({max_seq_len})"
        )
    return tokens


def fetch_keys(d: Decision, keys: tuple[int, ...]) -> tuple[int, ...]:
    """The block keys the prefill instance fetches from the Store: the decision's reused
    prefix when it is longer than what the instance holds itself, else none."""
    return keys[: d.prefix_blocks] if d.prefix_blocks > d.local_blocks else ()


def sampling_of(req: CompletionRequest) -> pb.Sampling:
    """The request's sampling parameters as the workers take them."""
    return pb.Sampling(
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        seed=req.seed,
        stop_at_eos=req.stop_at_eos,
        top_p=req.top_p,
    )


def prefill_request(
    d: Decision,
    keys: tuple[int, ...],
    tokens: list[int],
    req: CompletionRequest,
    reserved: pb.PrepareReply,
    *,
    store_kv: bool,
    cpp_peer: str,
    cpp_chunk_tokens: int,
) -> pb.PrefillRequest:
    """The Prefill RPC of a decision: what to fetch, and where the KV goes (the decode
    instance's blocks reserved at Prepare)."""
    return pb.PrefillRequest(
        request_id=d.request_id,
        tokens=tokens,
        sampling=sampling_of(req),
        fetch_keys=list(fetch_keys(d, keys)),
        fetch_source=d.migration.source if d.migration else "",
        target=pb.DecodeTarget(
            instance=d.decode,
            segment=reserved.segment,
            seq_id=reserved.seq_id,
            blocks=list(reserved.blocks),
            block_nbytes=reserved.block_nbytes,
            layer_nbytes=reserved.layer_nbytes,
        ),
        store_kv=store_kv,
        cpp_peer=cpp_peer,
        cpp_chunk_tokens=cpp_chunk_tokens,
    )


def first_is_last(req: CompletionRequest, first_token: int, eos: int) -> bool:
    """Whether prefill's token ends the request: one token asked, or EOS when it stops there."""
    return req.max_tokens == 1 or (req.stop_at_eos and first_token == eos)


class ChunkBuilder:
    """The chunks of one request: text decoded incrementally (never splitting a UTF-8
    character), the token counts of the prefill on the last chunk.

    Args:
        request_id: the request; prefill, decode: its instances.
        tokenizer: decodes the tokens.
        rep: the prefill's reply (its reused and computed tokens go on the last chunk).
    """

    def __init__(
        self,
        request_id: str,
        prefill: str,
        decode: str,
        tokenizer: TextTokenizer,
        rep: pb.PrefillReply,
    ) -> None:
        self.request_id = request_id
        self.prefill = prefill
        self.decode = decode
        self.reused = rep.reused_tokens
        self.computed = rep.computed_tokens
        self._text = IncrementalDecoder(tokenizer)

    def first(self, token: int, ttft: float, last: bool) -> CompletionChunk:
        """The first chunk (prefill's token), with the TTFT."""
        return self._chunk(token, 0, last, ttft_s=ttft)

    def next(self, token: int, index: int, last: bool, tbt: float | None) -> CompletionChunk:
        """A decoded token's chunk (the TBT on the last)."""
        return self._chunk(token, index, last, tbt_s=tbt)

    def _chunk(
        self,
        token: int,
        index: int,
        last: bool,
        ttft_s: float | None = None,
        tbt_s: float | None = None,
    ) -> CompletionChunk:
        text = self._text.push(token) + (self._text.flush() if last else "")
        return CompletionChunk(
            self.request_id,
            token,
            text,
            index,
            last,
            self.prefill,
            self.decode,
            ttft_s=ttft_s,
            tbt_s=tbt_s,
            reused_tokens=self.reused if last else None,
            computed_tokens=self.computed if last else None,
        )


def timings_of(rep: pb.PrefillReply) -> PrefillTimings | None:
    """The measured parts of a prefill as the worker reported them (``None`` for a CPP
    run: its parts are the pipeline's, not one instance's).

    Compute includes the waits for the last KV writes to the decode instance and the
    Store: the request's first token is only returned after them.
    """
    if rep.cpp:
        return None
    return PrefillTimings(
        queue_s=rep.queue_s,
        transfer_s=rep.fetch_s,
        compute_s=rep.compute_s + rep.stream_wait_s + rep.store_wait_s,
        reused_tokens=rep.reused_tokens,
    )
