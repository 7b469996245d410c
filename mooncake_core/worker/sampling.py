"""Token sampling: greedy, or temperature sampling (optionally nucleus, ``top_p``) from a
per-sequence seeded generator.

Each sequence owns its generator, so its tokens do not depend on which other sequences
share its decode batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Sampler", "SamplingParams"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens for one request.

    Attributes:
        max_tokens: tokens to generate (the first one comes from prefill).
        temperature: 0 is greedy; otherwise logits are divided by it before sampling.
        seed: seed of the sequence's generator (temperature > 0 only).
        stop_at_eos: stop after emitting ``EOS``.
        top_p: nucleus sampling: draw only from the most likely tokens whose
            probabilities sum to at least ``top_p`` (1: all; temperature > 0 only).

    Raises:
        ValueError: ``max_tokens < 1``, a negative/non-finite temperature, or
            ``top_p`` outside ``(0, 1]``.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    seed: int = 0
    stop_at_eos: bool = True
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not (self.temperature >= 0.0 and self.temperature < float("inf")):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


class Sampler:
    """Picks the next token from logits for one sequence.

    Args:
        params: temperature and seed.
    """

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._gen: torch.Generator | None = None
        if params.temperature > 0:
            self._gen = torch.Generator(device="cpu")
            self._gen.manual_seed(params.seed)

    def __call__(self, logits: torch.Tensor) -> int:
        """Return the next token id from ``logits`` ``[vocab]``."""
        if self._gen is None:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.detach().float().cpu() / self.params.temperature, dim=-1)
        if self.params.top_p < 1.0:
            probs = nucleus(probs, self.params.top_p)
        return int(torch.multinomial(probs, 1, generator=self._gen))


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` ``[vocab]`` with every token outside the nucleus zeroed: the most likely
    tokens, in order, up to and including the first that brings their sum to ``top_p``."""
    sorted_p, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of the tokens ranked above
    keep = before < top_p
    keep[0] = True
    out = torch.zeros_like(probs)
    out[order[keep]] = sorted_p[keep]
    return out
