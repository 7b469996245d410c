"""Workloads for the load generator: public traces scaled to the tiny model, or synthetic.

A trace request (``input_length``, ``output_length``, chained 512-token ``hash_ids``) is
turned into token ids deterministically: lengths are divided by ``divisor`` and every hash
id becomes its own block of ``512 / divisor`` pseudo-random tokens (seeded by the id), so
two requests whose traces share leading hash ids share exactly that token prefix, and the
prefix cache sees the trace's reuse pattern at the tiny model's scale.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from mooncake_core.sim.trace import TraceRequest

__all__ = ["LoadRequest", "scale_trace", "synthetic_prefix_workload"]

TRACE_BLOCK = 512


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """One request to send.

    Attributes:
        rid: position in the workload.
        arrival_s: when to send it, from the start of the run.
        tokens: prompt token ids.
        max_tokens: tokens to generate.
    """

    rid: int
    arrival_s: float
    tokens: tuple[int, ...]
    max_tokens: int


def _block_tokens(hash_id: int, n: int, vocab: int) -> list[int]:
    rng = random.Random(hash_id * 2654435761 + 97)
    return [rng.randrange(vocab) for _ in range(n)]


def scale_trace(
    requests: Sequence[TraceRequest],
    *,
    divisor: int = 32,
    max_input: int = 1000,
    max_output: int = 64,
    vocab: int = 256,
) -> list[LoadRequest]:
    """Scale trace requests to the tiny model.

    Args:
        requests: loaded trace (``mooncake_core.sim.trace.load_trace``).
        divisor: lengths (and the 512-token trace block) are divided by it.
        max_input: prompt tokens cap (the model's ``max_seq_len`` minus the output).
        max_output: output tokens cap.
        vocab: token ids are drawn from ``[0, vocab)`` (256: plain bytes).

    Raises:
        ValueError: ``divisor`` does not divide 512 or the caps are not positive.
    """
    if divisor < 1 or TRACE_BLOCK % divisor:
        raise ValueError(f"divisor must divide {TRACE_BLOCK}, got {divisor}")
    if max_input < 1 or max_output < 1:
        raise ValueError(f"caps must be >= 1, got max_input={max_input} max_output={max_output}")
    per_block = TRACE_BLOCK // divisor
    out = []
    cache: dict[int, list[int]] = {}
    for r in requests:
        n_in = max(1, min(max_input, r.input_length // divisor))
        toks: list[int] = []
        for h in r.hash_ids:
            if len(toks) >= n_in:
                break
            blk = cache.get(h)
            if blk is None:
                blk = cache[h] = _block_tokens(h, per_block, vocab)
            toks.extend(blk)
        if len(toks) < n_in:  # the trace numbers fewer blocks than the length says
            toks.extend(_block_tokens(-(r.rid + 1), n_in - len(toks), vocab))
        n_out = max(1, min(max_output, r.output_length // divisor))
        out.append(LoadRequest(r.rid, r.arrival_s, tuple(toks[:n_in]), n_out))
    return out


def synthetic_prefix_workload(
    n: int,
    *,
    prefixes: int = 4,
    prefix_tokens: int = 256,
    suffix_tokens: int = 32,
    max_tokens: int = 8,
    rate: float = 10.0,
    seed: int = 0,
    vocab: int = 256,
) -> list[LoadRequest]:
    """A prefix-heavy workload: each request is one of ``prefixes`` shared prefixes + a
    unique suffix, arriving as a Poisson process of ``rate`` requests/s.

    Raises:
        ValueError: non-positive sizes or rate.
    """
    if min(n, prefixes, prefix_tokens, suffix_tokens, max_tokens) < 1 or rate <= 0:
        raise ValueError("sizes and rate must be positive")
    rng = random.Random(seed)
    heads = [_block_tokens(10_000 + i, prefix_tokens, vocab) for i in range(prefixes)]
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(rate)
        head = heads[rng.randrange(prefixes)]
        tail = [rng.randrange(vocab) for _ in range(suffix_tokens)]
        out.append(LoadRequest(i, t, tuple(head + tail), max_tokens))
    return out
