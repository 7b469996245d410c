"""Decode side: reservations for incoming KV, continuous batching, per-request token streams.

The asyncio loop owns the bookkeeping (who waits, who runs, whose stream gets which
token); every engine call runs on the worker's single engine thread (an executor with one
thread), because the engine is not thread-safe and a decode step is CPU-heavy. The batch
loop is one coroutine: take waiting sequences up to ``max_batch``, run one step in the
engine thread, push each new token to its request's queue, retire finished sequences.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from mooncake_core.worker.engine import InferenceEngine
from mooncake_core.worker.sampling import SamplingParams

__all__ = ["DecodeRunner", "DecodeToken"]


@dataclass(frozen=True, slots=True)
class DecodeToken:
    """One generated token on its way to the conductor.

    Attributes:
        token: the token id.
        index: its position among the generated tokens (0 is prefill's first token).
        time: unix seconds when it was produced.
        finished: the request is complete after this token.
        batch: size of the decode step that produced it.
    """

    token: int
    index: int
    time: float
    finished: bool
    batch: int


_END = object()


class DecodeRunner:
    """Continuous batching over one engine, driven from the asyncio loop.

    Args:
        engine: the decode instance's engine.
        executor: the single engine thread.
        max_batch: most sequences per decode step.
    """

    def __init__(self, engine: InferenceEngine, executor: Executor, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.engine = engine
        self.executor = executor
        self.max_batch = max_batch
        self._queues: dict[str, asyncio.Queue[object]] = {}
        self._waiting: deque[str] = deque()
        self._running: list[str] = []
        self._reserved: dict[str, str] = {}  # request id -> reserved seq id
        self._live: dict[str, str] = {}  # request id -> adopted seq id
        self._cancelled: set[str] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self.last_batch = 0
        self.steps = 0
        self.tokens = 0
        self.failed = 0
        self.peak_batch = 0

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # ---- reservations ---------------------------------------------------------------------

    async def prepare(
        self, request_id: str, num_tokens: int, max_tokens: int = 0
    ) -> tuple[str, tuple[int, ...]]:
        """Reserve blocks for ``num_tokens`` of incoming KV and for ``max_tokens`` of decode.

        Reserving the decode's blocks up front is what keeps a full pool from failing
        requests mid-decode: one step that cannot find a block fails the whole batch, so
        a pool that is full refuses here (``CacheFullError``: the conductor answers 429),
        before prefill, and an admitted request always has the KV it will need.

        Returns:
            The sequence id and the blocks the prompt's KV is written into.

        Raises:
            ValueError: duplicate request, or prompt plus ``max_tokens`` beyond the
                model's ``max_seq_len``; CacheFullError: no room.
        """
        if request_id in self._reserved or request_id in self._live:
            raise ValueError(f"request {request_id!r} already has KV on this instance")
        sid, blocks = await self._call(
            functools.partial(self.engine.reserve_kv, num_tokens, max_tokens=max_tokens)
        )
        self._reserved[request_id] = sid
        return sid, blocks

    async def admit(
        self,
        request_id: str,
        seq_id: str,
        tokens: Sequence[int],
        next_token: int,
        sampling: SamplingParams,
    ) -> AsyncIterator[DecodeToken]:
        """Adopt the written KV and stream the tokens decode generates (index 1 onwards).

        Raises:
            KeyError: no reservation ``seq_id`` for ``request_id``; ValueError: length
                mismatch (the reservation is aborted).
        """
        if self._reserved.get(request_id) != seq_id:
            raise KeyError(f"no reservation {seq_id!r} for request {request_id!r}")
        del self._reserved[request_id]
        try:
            await self._call(self.engine.adopt_kv, seq_id, list(tokens), next_token, sampling)
        except BaseException:
            await self._call(self.engine.abort_kv, seq_id)
            raise
        self._live[request_id] = seq_id
        if self.engine.finished(seq_id):  # max_tokens 1, or the first token was EOS
            await self._retire(request_id, seq_id)
            return
        q: asyncio.Queue[object] = asyncio.Queue()
        self._queues[seq_id] = q
        self._waiting.append(seq_id)
        self._wake.set()
        try:
            while True:
                item = await q.get()
                if item is _END:
                    return
                if isinstance(item, Exception):
                    raise item
                assert isinstance(item, DecodeToken)
                yield item
                if item.finished:
                    return
        finally:
            if self._live.get(request_id) == seq_id and not self.engine.finished(seq_id):
                # The consumer went away mid-stream: stop decoding it.
                self._cancelled.add(seq_id)
                self._wake.set()
            self._queues.pop(seq_id, None)

    async def cancel(self, request_id: str) -> bool:
        """Drop a reservation or a decoding request; False if unknown."""
        sid = self._reserved.pop(request_id, None)
        if sid is not None:
            await self._call(self.engine.abort_kv, sid)
            return True
        sid = self._live.get(request_id)
        if sid is None:
            return False
        self._cancelled.add(sid)
        q = self._queues.get(sid)
        if q is not None:
            q.put_nowait(_END)
        self._wake.set()
        return True

    async def _retire(self, request_id: str, seq_id: str) -> None:
        self._live.pop(request_id, None)
        await self._call(self.engine.release, seq_id)

    # ---- the batch loop -------------------------------------------------------------------

    def _step(self, batch: list[str]) -> tuple[dict[str, int], set[str], float]:
        out = self.engine.decode_step(batch)
        done = {s for s in batch if self.engine.finished(s)}
        return out, done, time.time()

    async def run(self) -> None:
        """The batch loop; runs until :meth:`stop`."""
        req_of = lambda sid: next((r for r, s in self._live.items() if s == sid), None)  # noqa: E731
        while not self._stopping:
            for sid in [s for s in self._running if s in self._cancelled]:
                self._running.remove(sid)
                self._cancelled.discard(sid)
                rid = req_of(sid)
                if rid is not None:
                    await self._retire(rid, sid)
            while self._waiting and len(self._running) < self.max_batch:
                sid = self._waiting.popleft()
                if sid in self._cancelled:
                    self._cancelled.discard(sid)
                    rid = req_of(sid)
                    if rid is not None:
                        await self._retire(rid, sid)
                    continue
                self._running.append(sid)
            if not self._running:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = list(self._running)
            try:
                out, done, now = await self._call(self._step, batch)
            except Exception as exc:  # e.g. CacheFullError: no block for a new token
                # The step changed nothing (engine failures leave the cache as it was);
                # end the whole batch with the error rather than stopping the loop.
                self.failed += len(batch)
                for sid in batch:
                    self._running.remove(sid)
                    self._cancelled.discard(sid)
                    q = self._queues.get(sid)
                    if q is not None:
                        q.put_nowait(exc)
                    rid = req_of(sid)
                    if rid is not None:
                        await self._retire(rid, sid)
                continue
            self.steps += 1
            self.tokens += len(out)
            self.last_batch = len(batch)
            self.peak_batch = max(self.peak_batch, len(batch))
            for sid, tok in out.items():
                q = self._queues.get(sid)
                if q is not None:
                    idx = len(self.engine.generated(sid)) - 1
                    q.put_nowait(DecodeToken(tok, idx, now, sid in done, len(batch)))
            for sid in done:
                self._running.remove(sid)
                self._cancelled.discard(sid)
                rid = req_of(sid)
                if rid is not None:
                    await self._retire(rid, sid)

    def stop(self) -> None:
        """End the loop and every open stream."""
        self._stopping = True
        self._wake.set()
        for q in self._queues.values():
            q.put_nowait(_END)

    @property
    def running(self) -> int:
        """Sequences in the batch or waiting for a slot."""
        return len(self._running) + len(self._waiting)
