"""Per-instance load state the Conductor keeps: prefill queues and decode batches."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DecodeInstanceSnapshot",
    "DecodeInstanceState",
    "PrefillInstanceSnapshot",
    "PrefillInstanceState",
]


@dataclass(frozen=True, slots=True)
class PrefillInstanceSnapshot:
    """A prefill instance's load at one instant."""

    name: str
    queued: int
    running: int
    queue_time_s: float


@dataclass(frozen=True, slots=True)
class DecodeInstanceSnapshot:
    """A decode instance's load at one instant."""

    name: str
    batch: int
    max_batch: int
    context_tokens: int
    reserved: int
    kv_capacity_tokens: int | None = None
    """KV tokens the instance can hold (``None``: not limited by the Conductor)."""
    reported_kv_tokens: int | None = None
    """KV tokens in use as the worker last reported (``None``: no report)."""

    @property
    def load(self) -> float:
        """``max(batch / max_batch, context_tokens / kv_capacity_tokens)``."""
        slots = self.batch / self.max_batch
        if self.kv_capacity_tokens is None:
            return slots
        return max(slots, self.context_tokens / self.kv_capacity_tokens)


class PrefillInstanceState:
    """FIFO of requests assigned to one prefill instance, with predicted execution times.

    ``T_queue(now)`` is what a new request would wait: the remaining predicted time of
    what is running plus the predicted times of everything queued. The same sums are
    kept for the uncalibrated model's predictions (:meth:`model_queue_time`), so every
    decision can record what the model alone would have predicted beside what was used.

    Args:
        name: instance name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queued: dict[str, float] = {}
        self._queued_sum = 0.0
        self._running: dict[str, float] = {}
        self._model: dict[str, float] = {}
        self._model_sum = 0.0
        self._model_running: dict[str, float] = {}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._queued or request_id in self._running

    def enqueue(self, request_id: str, predicted_s: float, model_s: float | None = None) -> None:
        """Queue a request whose prefill (fetch included) is predicted to take ``predicted_s``.

        Args:
            request_id: the request.
            predicted_s: predicted execution time (calibrated, when calibration is on).
            model_s: the uncalibrated model's prediction (default ``predicted_s``).

        Raises:
            ValueError: the request is already here, or a negative prediction.
        """
        if request_id in self:
            raise ValueError(f"request {request_id!r} is already on prefill instance {self.name!r}")
        if not predicted_s >= 0:
            raise ValueError(f"predicted prefill time must be >= 0, got {predicted_s!r}")
        m = predicted_s if model_s is None else model_s
        self._queued[request_id] = predicted_s
        self._queued_sum += predicted_s
        self._model[request_id] = m
        self._model_sum += m

    def start(self, request_id: str, now: float) -> None:
        """The request left the queue and started; it is expected to finish at ``now + predicted``.

        Raises:
            KeyError: the request is not queued here.
        """
        predicted = self._queued.pop(request_id, None)
        if predicted is None:
            raise KeyError(
                f"request {request_id!r} is not queued on prefill instance {self.name!r}"
            )
        self._queued_sum = self._queued_sum - predicted if self._queued else 0.0
        self._running[request_id] = now + predicted
        m = self._model.pop(request_id, predicted)
        self._model_sum = self._model_sum - m if self._model else 0.0
        self._model_running[request_id] = now + m

    def finish(self, request_id: str) -> None:
        """The request's prefill ended (or it was dropped while queued)."""
        self._model_running.pop(request_id, None)
        if self._running.pop(request_id, None) is None:
            predicted = self._queued.pop(request_id, None)
            if predicted is not None:
                self._queued_sum = self._queued_sum - predicted if self._queued else 0.0
                m = self._model.pop(request_id, predicted)
                self._model_sum = self._model_sum - m if self._model else 0.0

    def queue_time(self, now: float) -> float:
        """Predicted seconds before a request enqueued now would start."""
        wait = self._queued_sum
        if self._running:
            for finish in self._running.values():
                if finish > now:
                    wait += finish - now
        return wait

    def model_queue_time(self, now: float) -> float:
        """:meth:`queue_time` under the uncalibrated model's predictions."""
        wait = self._model_sum
        for finish in self._model_running.values():
            if finish > now:
                wait += finish - now
        return wait

    def snapshot(self, now: float) -> PrefillInstanceSnapshot:
        """Load at ``now``."""
        return PrefillInstanceSnapshot(
            self.name, len(self._queued), len(self._running), self.queue_time(now)
        )


class DecodeInstanceState:
    """Continuous batch of one decode instance, plus slots reserved by admitted requests.

    A decode instance is limited by batch slots *and* by the KV memory left after the
    weights (the limit that binds for long contexts); load is the larger of the two
    fractions.

    Args:
        name: instance name.
        max_batch: most requests decoding at once.
        kv_capacity_tokens: most context tokens whose KV fits at once (``None``: unlimited,
            the behaviour before KV capacity was modelled).

    Raises:
        ValueError: ``max_batch`` below 1 or ``kv_capacity_tokens`` below 1.
    """

    def __init__(self, name: str, max_batch: int, kv_capacity_tokens: int | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"decode instance {name!r}: max_batch must be >= 1, got {max_batch}")
        if kv_capacity_tokens is not None and kv_capacity_tokens < 1:
            raise ValueError(
                f"decode instance {name!r}: kv_capacity_tokens must be >= 1 or None, "
                f"got {kv_capacity_tokens}"
            )
        self.name = name
        self.max_batch = max_batch
        self.kv_capacity_tokens = kv_capacity_tokens
        self.reported_kv_tokens: int | None = None
        """KV tokens in use as the worker last reported (live service; informational)."""
        self._active: dict[str, tuple[int, float]] = {}
        self._context = 0
        self._reserved: dict[str, int] = {}
        self._reserved_context = 0

    @property
    def batch(self) -> int:
        """Requests decoding now."""
        return len(self._active)

    @property
    def context_tokens(self) -> int:
        """Total context of the requests decoding now."""
        return self._context

    @property
    def reserved(self) -> int:
        """Requests admitted to this instance that have not joined yet."""
        return len(self._reserved)

    @property
    def expected_batch(self) -> int:
        """Batch once the reserved requests have joined."""
        return len(self._active) + len(self._reserved)

    @property
    def expected_context(self) -> int:
        """Context tokens once the reserved requests have joined."""
        return self._context + self._reserved_context

    def has_room(self, context_tokens: int = 0) -> bool:
        """Whether one more request with ``context_tokens`` of KV can join the batch now.

        An empty instance always has room for one request, however long: a prompt larger
        than the whole KV capacity could never be served otherwise (the engine pages or
        truncates it; that is not the Conductor's call).
        """
        if len(self._active) >= self.max_batch:
            return False
        cap = self.kv_capacity_tokens
        return cap is None or not self._active or self._context + context_tokens <= cap

    def fits_expected(self, context_tokens: int) -> bool:
        """Whether a request fits once the reserved requests have joined (slots and KV)."""
        if self.expected_batch >= self.max_batch:
            return False
        cap = self.kv_capacity_tokens
        return (
            cap is None
            or self.expected_batch == 0
            or (self.expected_context + context_tokens <= cap)
        )

    def load(self, extra_requests: int = 0, extra_tokens: int = 0) -> float:
        """``max(batch / max_batch, context / kv_capacity)``, optionally with extra requests.

        Args:
            extra_requests: requests to count on top of those decoding now.
            extra_tokens: context tokens to count on top of those decoding now.
        """
        slots = (len(self._active) + extra_requests) / self.max_batch
        cap = self.kv_capacity_tokens
        if cap is None:
            return slots
        return max(slots, (self._context + extra_tokens) / cap)

    def active_since(self) -> list[float]:
        """Join times of the requests decoding now."""
        return [t for _, t in self._active.values()]

    def active_requests(self) -> list[tuple[float, int]]:
        """``(join time, context tokens)`` of each request decoding now."""
        return [(t, c) for c, t in self._active.values()]

    def reserve(self, request_id: str, context: int) -> None:
        """Remember an admitted request that will join after its prefill."""
        self.unreserve(request_id)
        self._reserved[request_id] = context
        self._reserved_context += context

    def unreserve(self, request_id: str) -> None:
        """Forget a reservation (the request joined elsewhere or was dropped)."""
        context = self._reserved.pop(request_id, None)
        if context is not None:
            self._reserved_context -= context

    def join(self, request_id: str, context: int, now: float) -> None:
        """The request joins the batch with ``context`` tokens.

        Raises:
            ValueError: it is already decoding here, or a negative context.
        """
        if request_id in self._active:
            raise ValueError(f"request {request_id!r} already decodes on {self.name!r}")
        if context < 0:
            raise ValueError(f"context must be >= 0 tokens, got {context}")
        self.unreserve(request_id)
        self._active[request_id] = (context, now)
        self._context += context

    def leave(self, request_id: str) -> bool:
        """The request finished decoding; returns whether it was here."""
        entry = self._active.pop(request_id, None)
        if entry is None:
            return False
        self._context -= entry[0]
        return True

    def snapshot(self) -> DecodeInstanceSnapshot:
        """Load now."""
        return DecodeInstanceSnapshot(
            self.name,
            len(self._active),
            self.max_batch,
            self._context,
            len(self._reserved),
            self.kv_capacity_tokens,
            self.reported_kv_tokens,
        )
