"""A decode instance under continuous batching, stepped by the engine.

Each step produces one token for every request in the batch and takes
``T_step(batch, context)`` from the cost model. Requests join and leave only at step
boundaries. A request that arrives while the batch is full (by slots or by KV capacity)
waits in a FIFO until a step ends with room.

Per-request token intervals are recovered from the instance's list of step end times,
so the hot loop does O(1) work per step instead of O(batch).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from mooncake_core.conductor.predictors import DecodeStepModel
from mooncake_core.sim.results import worst_decile_mean

__all__ = ["DecodeDone", "DecodeSim"]


@dataclass(frozen=True, slots=True)
class DecodeDone:
    """A request finished decoding."""

    rid: int
    finish_s: float
    tbt_s: float


class DecodeSim:
    """One decode instance.

    Args:
        name: instance name.
        model: step time model.
        max_batch: most requests per batch.
        kv_capacity_tokens: most context tokens held at once.
    """

    def __init__(
        self, name: str, model: DecodeStepModel, max_batch: int, kv_capacity_tokens: int
    ) -> None:
        self.name = name
        self.model = model
        self.max_batch = max_batch
        self.kv_capacity = kv_capacity_tokens
        self.batch = 0
        self.context = 0
        self.stepping = False
        self.step_end: list[float] = []
        # step index -> [(rid, join_step, first_token_s, context_at_end)]
        self._finish: dict[int, list[tuple[int, int, float, int]]] = {}
        self._waiting: deque[tuple[int, int, int, float]] = deque()

    @property
    def waiting(self) -> int:
        """Requests waiting for room."""
        return len(self._waiting)

    def _fits(self, context: int) -> bool:
        # An empty instance always takes one request, however long: it would never fit otherwise.
        return self.batch == 0 or (
            self.batch < self.max_batch and self.context + context <= self.kv_capacity
        )

    def _admit(self, rid: int, context: int, steps: int, first_token_s: float) -> None:
        k = len(self.step_end)
        self.batch += 1
        self.context += context
        self._finish.setdefault(k + steps - 1, []).append((rid, k, first_token_s, context + steps))

    def join(self, rid: int, context: int, steps: int, first_token_s: float, now: float) -> bool:
        """Add a request that needs ``steps`` decode steps; returns whether a step must start now.

        Args:
            rid: request id.
            context: its prompt tokens (its KV held here).
            steps: tokens still to generate (``output_length - 1``), at least 1.
            first_token_s: when its first token (from prefill) was produced.
            now: current time.
        """
        if self.stepping or not self._fits(context):
            self._waiting.append((rid, context, steps, first_token_s))
            return False
        self._admit(rid, context, steps, first_token_s)
        self.stepping = True
        return True

    def step_time(self) -> float:
        """Duration of the step about to start."""
        return self.model.step_time(self.batch, self.context)

    def end_step(self, now: float) -> tuple[list[DecodeDone], bool]:
        """Finish the current step at ``now``.

        Returns:
            ``(done, more)``: requests that produced their last token, and whether another
            step starts now.
        """
        k = len(self.step_end)
        self.step_end.append(now)
        self.context += self.batch
        done: list[DecodeDone] = []
        for rid, k0, first, ctx_end in self._finish.pop(k, ()):
            self.batch -= 1
            self.context -= ctx_end
            times = np.empty(k - k0 + 2)
            times[0] = first
            times[1:] = self.step_end[k0 : k + 1]
            done.append(DecodeDone(rid, now, worst_decile_mean(np.diff(times))))
        while self._waiting and self._fits(self._waiting[0][1]):
            rid, context, steps, first = self._waiting.popleft()
            self._admit(rid, context, steps, first)
        self.stepping = self.batch > 0
        return done, self.stepping
