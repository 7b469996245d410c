"""The front door's logic: one completion request through schedule, prefill and decode.

The HTTP adapter (``mooncake_web/frontdoor``) only translates JSON/SSE to and from
:meth:`FrontDoor.complete`; everything else is here, on the conductor's event loop:

```
complete(req)
  prompt_tokens(req)                     text -> ids, checked against vocab and max_seq_len
  _decide       block keys -> Conductor.schedule -> audit.submit_source
                rejected?  -> audit row committed -> raise Rejected(retry_after)   (HTTP 429)
  _run          audit row committed  (a SIGKILL now cannot lose a dispatched decision)
    _prepare_decode   decode.Prepare(len, max_tokens): reserve prompt and decode blocks
    _prefill          prefill.Prefill(prefill_request(...)) sent after the previous request's
                      (per instance: the worker runs them in the Conductor's order)
                      worker: Store fetch -> incremental prefill -> layer-wise store + KV WRITEs
    _prefill_done     on_prefill_done, on_actual(TTFT + the worker's timings: calibration)
    _join_decode      on_decode_join
    _stream           yield first token (TTFT); decode.Admit(...) -> yield tokens   (TBT)
                      (the first token ends it at max_tokens 1, or at the model's EOS)
    _completed        on_decode_done, on_actual, audit.update_actual, "completed"
    any other end     _ended (audit.record_outcome, counters) -> _cleanup (Cancel, forget)
  done, 429 or error: outcome committed before the answer ends
```

The sans-IO parts of the steps are functions in ``completion.py`` (``prompt_tokens``,
``fetch_keys``, ``prefill_request``, ``first_is_last``, ``ChunkBuilder``), re-exported
here and tested without workers. EOS is the model's (``model.eos_token``: a checkpoint's
own id, 257 for the byte tokenizer), the one the workers stop at.

"Committed" waits for the audit writer's next group commit (``AuditWriter.when_written``,
about a millisecond), at most ``audit_wait_s``: a database that hangs slows requests by
that much, never stops them (counted in ``FrontDoorStats.audit_unconfirmed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from mooncake_core.conductor.decision import Decision, ScheduleRequest
from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.conductor.scheduler import Conductor
from mooncake_core.conductor.service.completion import (
    ChunkBuilder,
    CompletionChunk,
    CompletionRequest,
    fetch_keys,
    first_is_last,
    prefill_request,
    prompt_tokens,
    sampling_of,
    tbt_of,
    timings_of,
)
from mooncake_core.conductor.service.links import WorkerLink
from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.worker.bpe_tokenizer import TextTokenizer
from mooncake_core.worker.tokenizer import VOCAB_SIZE, ByteTokenizer

if TYPE_CHECKING:
    from mooncake_core.conductor.audit.process_writer import AuditSink
    from mooncake_core.conductor.audit.records import Outcome

__all__ = [
    "ChunkBuilder",
    "CompletionChunk",
    "CompletionRequest",
    "CompletionStream",
    "FrontDoor",
    "FrontDoorStats",
    "Rejected",
    "ServingError",
    "fetch_keys",
    "first_is_last",
    "outcome_of",
    "prefill_request",
    "prompt_tokens",
    "sampling_of",
    "tbt_of",
    "timings_of",
]

log = logging.getLogger(__name__)


class Rejected(Exception):
    """Admission control refused the request (HTTP 429).

    Attributes:
        reason: the stable reason code; detail: a sentence; retry_after_s: the hint.
    """

    def __init__(self, reason: str, detail: str, retry_after_s: float) -> None:
        super().__init__(f"rejected ({reason}): {detail}")
        self.reason = reason
        self.detail = detail
        self.retry_after_s = retry_after_s


class ServingError(Exception):
    """A worker failed while serving the request (HTTP 503 before the first token)."""


@dataclass(slots=True)
class FrontDoorStats:
    """Counters of the front door."""

    requests: int = 0
    rejected: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    reused_tokens: int = 0
    computed_tokens: int = 0
    fetched_blocks: int = 0
    stored_blocks: int = 0
    cpp: int = 0
    kv_full: int = 0
    audit_unconfirmed: int = 0
    """Waits for an audit commit that timed out or failed (the request went on)."""
    by_reason: dict[str, int] = field(default_factory=dict)


class FrontDoor:
    """Serves completion requests over the live workers.

    Args:
        conductor: the sans-IO scheduler (only touched on this event loop).
        links: workers by name.
        hashing: the block hasher shared with the workers.
        audit: the audit writer, or None.
        store_kv: ask prefill workers to store new blocks to the Store layer-wise.
        rpc_timeout_s: deadline of one prefill / prepare call.
        model_name: served model id.
        vocab_size: the model's vocabulary (token ids are checked against it).
        cpp_threshold: prompts longer than this run on a 2-stage CPP group (the chosen
            prefill instance and the next one in config order); 0 disables CPP.
        cpp_chunk_tokens: CPP chunk size.
        tokenizer: the model's tokenizer (default the byte tokenizer).
        eos_token: the model's end-of-sequence id, the one its workers stop at
            (``model.eos_token``; default the tokenizer's).
        max_seq_len: prompt + max_tokens above this is refused (ValueError).
        audit_wait_s: longest wait for the audit row of a decision (or an outcome) to be
            committed before the request goes on.
    """

    def __init__(
        self,
        conductor: Conductor,
        links: dict[str, WorkerLink],
        hasher: BlockHasher,
        *,
        audit: AuditSink | None = None,
        store_kv: bool = True,
        rpc_timeout_s: float = 60.0,
        model_name: str = "mooncake-tiny",
        vocab_size: int = VOCAB_SIZE,
        cpp_threshold: int = 0,
        cpp_chunk_tokens: int = 256,
        audit_wait_s: float = 2.0,
        tokenizer: TextTokenizer | None = None,
        max_seq_len: int | None = None,
        eos_token: int | None = None,
    ) -> None:
        self.conductor = conductor
        self.links = links
        self.hasher = hasher
        self.audit = audit
        self.store_kv = store_kv
        self.rpc_timeout_s = rpc_timeout_s
        self.model_name = model_name
        self.vocab_size = vocab_size
        self.cpp_threshold = cpp_threshold
        self.cpp_chunk_tokens = cpp_chunk_tokens
        self.audit_wait_s = audit_wait_s
        self.tokenizer: TextTokenizer = tokenizer or ByteTokenizer()
        self.eos_token = self.tokenizer.eos if eos_token is None else eos_token
        self.max_seq_len = max_seq_len
        self.stats = FrontDoorStats()
        self._ids = itertools.count(1)
        self._boot = f"{int(time.time() * 1000):x}"
        # Per prefill instance, in dispatch order: the worker runs them FIFO on its engine
        # thread, so the head is the one computing (on_prefill_start when it reaches it).
        self._fifo: dict[str, deque[str]] = {}
        # Per prefill instance, the send of the last dispatched request's Prefill RPC:
        # each request sends after the one dispatched before it, so the worker receives
        # them in the Conductor's order (otherwise a long prompt's slower Prepare lets
        # the short ones behind it overtake, and every queue prediction is off).
        self._sends: dict[str, asyncio.Event] = {}

    async def _audit_committed(self) -> None:
        """Wait until everything queued to the audit so far is committed (bounded)."""
        audit = self.audit
        if audit is None:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()

        def settle(ok: bool) -> None:
            if not fut.done():
                fut.set_result(ok)

        def done(ok: bool) -> None:  # on the writer thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, ok)

        audit.when_written(done)
        try:
            ok = await asyncio.wait_for(fut, self.audit_wait_s)
        except TimeoutError:
            ok = False
        if not ok:
            self.stats.audit_unconfirmed += 1

    def _link(self, name: str) -> WorkerLink:
        try:
            return self.links[name]
        except KeyError:
            raise ServingError(f"no connection to worker {name!r}") from None

    def _start_next(self, instance: str, now: float) -> None:
        q = self._fifo.get(instance)
        if q:
            with contextlib.suppress(KeyError):  # forgotten: its instance was removed
                self.conductor.on_prefill_start(q[0], now)

    def _leave_fifo(self, instance: str, rid: str, now: float) -> None:
        q = self._fifo.get(instance)
        if not q or rid not in q:
            return
        head = q[0] == rid
        q.remove(rid)
        if head:
            self._start_next(instance, now)

    def _sent(self, instance: str, mine: asyncio.Event) -> None:
        """This request's Prefill is sent (or will never be): the next one may go."""
        mine.set()
        if self._sends.get(instance) is mine:
            del self._sends[instance]

    def _cpp_peer(self, leader: str, length: int) -> str:
        """Address of the CPP stage-1 worker for a prompt of ``length``, or "" (no CPP)."""
        if not self.cpp_threshold or length <= self.cpp_threshold:
            return ""
        names = [n for n, link in self.links.items() if link.role == "prefill"]
        if len(names) < 2:
            return ""
        peer = names[(names.index(leader) + 1) % len(names)]
        self.stats.cpp += 1
        return self.links[peer].address

    def new_request_id(self) -> str:
        """A fresh request id (unique in this conductor's lifetime)."""
        return f"cmpl-{self._boot}-{next(self._ids)}"

    def stream(
        self,
        req: CompletionRequest,
        request_id: str | None = None,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> CompletionStream:
        """Start a request in its own task (see :class:`CompletionStream`).

        Errors of :meth:`complete` are raised by the stream's iteration.
        """
        return CompletionStream(self.complete(req, request_id), disconnected)

    async def complete(
        self, req: CompletionRequest, request_id: str | None = None
    ) -> AsyncIterator[CompletionChunk]:
        """Run one request; yields its tokens as they are generated.

        Raises:
            Rejected: before the first chunk, when admission control refuses it or a
                worker's KV pool is full (``decode_kv_full`` / ``prefill_kv_full``).
            ServingError: a worker failed (before or after the first chunk).
            ValueError: a bad token id or a prompt longer than the model allows.
        """
        rid = request_id or self.new_request_id()
        arrival = time.time()
        tokens = prompt_tokens(req, self.tokenizer, self.vocab_size, self.max_seq_len)
        keys = tuple(self.hasher.block_keys(tokens))
        d = await self._decide(rid, tokens, keys, req, arrival)
        async for chunk in self._run(rid, d, tokens, keys, req, arrival):
            yield chunk

    async def _decide(
        self,
        rid: str,
        tokens: list[int],
        keys: tuple[int, ...],
        req: CompletionRequest,
        arrival: float,
    ) -> Decision:
        """Step 1: schedule the request; a rejection is audited, committed and raised.

        Raises:
            ServingError: no prefill or no decode worker is up.
            Rejected: admission control refused it.
        """
        self.stats.requests += 1
        for role in ("prefill", "decode"):
            if not any(lk.up for lk in self.links.values() if lk.role == role):
                self.stats.failed += 1
                raise ServingError(f"no {role} worker is up")
        d = self.conductor.schedule(
            ScheduleRequest(rid, keys, len(tokens), req.max_tokens), arrival
        )
        if self.audit is not None:
            self.audit.submit_source(d)
        if d.admitted:
            return d
        self._count_rejected(d.reason)
        detail = d.admission.detail
        if self.audit is not None:
            self.audit.record_outcome(rid, "rejected", f"{d.reason}: {detail}")
            await self._audit_committed()
        raise Rejected(d.reason, detail, d.retry_after_s or 1.0)

    async def _run(
        self,
        rid: str,
        d: Decision,
        tokens: list[int],
        keys: tuple[int, ...],
        req: CompletionRequest,
        arrival: float,
    ) -> AsyncIterator[CompletionChunk]:
        """Steps 2 to 5 of an admitted request; every end is accounted for exactly once.

        ```
        audit committed -> _prepare_decode -> _prefill -> _prefill_done -> _join_decode
          -> _stream (yields) -> _completed           any exception: _ended -> _cleanup
        ```
        """
        try:
            pre, dec = self._link(d.prefill), self._link(d.decode)
        except ServingError as exc:  # a worker the Conductor still lists lost its link
            self._ended(rid, exc)
            with contextlib.suppress(KeyError):
                self.conductor.cancel(rid, time.time())
            await self._audit_committed()
            raise
        f = _Flight(rid, d, tokens, keys, req, arrival, pre, dec)
        before, mine = self._queue_prefill(d.prefill, rid)
        try:
            await self._audit_committed()  # nothing is dispatched for a decision not on disk
            f.reserved = await self._prepare_decode(f)
            rep = await self._prefill(f, before, mine)
            now = time.time()
            ttft = self._prefill_done(f, rep, now)
            self._join_decode(f, now)
            async with contextlib.aclosing(self._stream(f, rep, now, ttft)) as chunks:
                async for chunk in chunks:
                    yield chunk
            self._completed(f, ttft)
        except BaseException as exc:
            self._sent(d.prefill, mine)
            self._ended(rid, exc)
            await self._cleanup(f)
            if isinstance(exc, Exception):  # a 429 or 503 is answered after its outcome is
                await self._audit_committed()
            raise
        # The answer ends (the last chunk of a stream, the whole body otherwise) once the
        # outcome is committed.
        await self._audit_committed()

    def _queue_prefill(self, instance: str, rid: str) -> tuple[asyncio.Event | None, asyncio.Event]:
        """Join ``instance``'s FIFO; returns the previous request's send event and ours."""
        q = self._fifo.setdefault(instance, deque())
        q.append(rid)
        if len(q) == 1:
            self._start_next(instance, time.time())
        before = self._sends.get(instance)
        mine = self._sends[instance] = asyncio.Event()
        return before, mine

    async def _prepare_decode(self, f: _Flight) -> pb.PrepareReply:
        """Step 2: reserve the prompt's and the decode's KV blocks on the decode instance.

        Raises:
            Rejected: ``decode_kv_full``.
            ServingError: the RPC failed.
        """
        try:
            reply: pb.PrepareReply = await f.dec.stub.Prepare(
                pb.PrepareRequest(
                    request_id=f.rid, num_tokens=len(f.tokens), max_tokens=f.req.max_tokens
                ),
                timeout=self.rpc_timeout_s,
                metadata=f.dec.metadata,
            )
        except grpc.RpcError as exc:
            raise self._rpc_failure(exc, "decode") from None
        return reply

    async def _prefill(
        self, f: _Flight, before: asyncio.Event | None, mine: asyncio.Event
    ) -> pb.PrefillReply:
        """Step 3: the prefill RPC, sent after the previous request's on the instance.

        Raises:
            Rejected: ``prefill_kv_full``.
            ServingError: the RPC failed.
        """
        assert f.reserved is not None
        try:
            if before is not None and not before.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(before.wait(), self.rpc_timeout_s)
            call = f.pre.stub.Prefill(
                prefill_request(
                    f.d,
                    f.keys,
                    f.tokens,
                    f.req,
                    f.reserved,
                    store_kv=self.store_kv,
                    cpp_peer=self._cpp_peer(f.d.prefill, len(f.tokens)),
                    cpp_chunk_tokens=self.cpp_chunk_tokens,
                ),
                timeout=self.rpc_timeout_s,
                metadata=f.pre.metadata,
            )
            self._sent(f.d.prefill, mine)  # the call is started: the next may follow
            reply: pb.PrefillReply = await call
        except grpc.RpcError as exc:
            raise self._rpc_failure(exc, "prefill") from None
        return reply

    def _rpc_failure(self, exc: grpc.RpcError, where: str) -> Rejected | ServingError:
        """What a failed Prepare (``where`` "decode") or Prefill ("prefill") raises."""
        if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            # A KV pool is full: overload, like an admission rejection (the Conductor
            # counts batch slots, not KV blocks).
            self.stats.kv_full += 1
            return Rejected(f"{where}_kv_full", _rpc_text(exc), 1.0)
        return ServingError(_rpc_text(exc))

    def _prefill_done(self, f: _Flight, rep: pb.PrefillReply, now: float) -> float:
        """Account the prefill (FIFO, Conductor, calibration, counters); returns the TTFT.

        Raises:
            ServingError: the Conductor forgot the request (its instance was removed).
        """
        ttft = now - f.arrival
        self._leave_fifo(f.d.prefill, f.rid, now)
        fetched = bool(fetch_keys(f.d, f.keys))
        try:
            self.conductor.on_prefill_done(
                f.rid,
                now,
                actual_transfer_s=rep.fetch_s if fetched else None,
                fetched_blocks=rep.fetched_blocks if fetched else None,
            )
        except KeyError:
            raise ServingError(f"request dropped: {f.d.prefill} was removed") from None
        # The calibration learns as soon as the TTFT is known, from the worker's parts.
        self.conductor.on_actual(f.rid, ttft, timings=timings_of(rep))
        st = self.stats
        st.reused_tokens += rep.reused_tokens
        st.computed_tokens += rep.computed_tokens
        st.fetched_blocks += rep.fetched_blocks
        st.stored_blocks += rep.stored_blocks
        return ttft

    def _join_decode(self, f: _Flight, now: float) -> None:
        """Step 4a: the request joins its decode instance's batch in the Conductor.

        Raises:
            ServingError: the Conductor forgot the request, or refused the join.
        """
        try:
            # The worker reserved the KV blocks at Prepare and the KV is in them now:
            # the request decodes there (the Conductor's own estimate must not move it).
            join = self.conductor.on_decode_join(f.rid, now, placed=True)
        except KeyError:
            raise ServingError(f"request dropped: {f.d.decode} was removed") from None
        if not join.admitted:
            raise ServingError(f"rejected at decode join: {join.reason}")
        f.admitted = True

    async def _stream(
        self, f: _Flight, rep: pb.PrefillReply, now: float, ttft: float
    ) -> AsyncGenerator[CompletionChunk, None]:
        """Step 4b: the first token, then the decode instance's tokens as they come.

        Appends each token's arrival time to ``f.times``.

        Raises:
            ServingError: the decode stream failed or ended before the last token.
        """
        sampling = sampling_of(f.req)
        chunks = ChunkBuilder(f.rid, f.d.prefill, f.d.decode, self.tokenizer, rep)
        f.times.append(now)
        first_done = first_is_last(f.req, rep.first_token, self.eos_token)
        first = chunks.first(rep.first_token, ttft, first_done)
        assert f.reserved is not None
        call: Any = f.dec.stub.Admit(
            pb.AdmitRequest(
                request_id=f.rid,
                seq_id=f.reserved.seq_id,
                tokens=f.tokens,
                next_token=rep.first_token,
                sampling=sampling,
            ),
            metadata=f.dec.metadata,
        )
        f.reserved = None  # Admit owns the reservation now (it aborts on failure)
        yield first
        if first_done:
            async for _ in call:  # lets the worker retire the sequence
                pass
            return
        finished = False
        try:
            async for ev in call:
                f.times.append(time.time())
                finished = ev.finished
                tbt = tbt_of(f.times) if finished else None
                yield chunks.next(ev.token, ev.index, finished, tbt)
        except grpc.RpcError as exc:
            raise ServingError(f"decode stream: {_rpc_text(exc)}") from None
        if not finished:
            raise ServingError(f"decode {f.d.decode} ended the stream before the last token")

    def _completed(self, f: _Flight, ttft: float) -> None:
        """Step 5, success: the Conductor, the calibration, the audit and the counters."""
        end = time.time()
        f.admitted = False
        tbt_final = tbt_of(f.times)
        with contextlib.suppress(KeyError):  # forgotten if its decode worker was removed
            self.conductor.on_decode_done(f.rid, end)
            self.conductor.on_actual(f.rid, None, tbt_final)
        if self.audit is not None:
            self.audit.update_actual(f.rid, ttft, tbt_final)
            self.audit.record_outcome(f.rid, "completed")
        self.stats.completed += 1

    def _ended(self, rid: str, exc: BaseException) -> None:
        """Step 5, any other end: the audit outcome and the counters (see :func:`outcome_of`)."""
        outcome, detail = outcome_of(exc)
        if self.audit is not None:
            # Before the clean-up: it awaits, and a second cancellation there must not
            # lose the record. record_outcome only appends to a queue.
            self.audit.record_outcome(rid, outcome, detail)
        # The counters classify exactly as the audit does (outcome_of).
        if isinstance(exc, Rejected):
            self._count_rejected(exc.reason)
        elif outcome == "failed":
            self.stats.failed += 1
            log.warning("request %s failed: %s", rid, detail)
        else:
            self.stats.cancelled += 1

    def _count_rejected(self, reason: str) -> None:
        self.stats.rejected += 1
        self.stats.by_reason[reason] = self.stats.by_reason.get(reason, 0) + 1

    async def _cleanup(self, f: _Flight) -> None:
        """Free what a request that did not complete holds (FIFO, decode worker, Conductor)."""
        now = time.time()
        self._leave_fifo(f.d.prefill, f.rid, now)
        with contextlib.suppress(grpc.RpcError):
            await f.dec.stub.Cancel(
                pb.CancelRequest(request_id=f.rid), timeout=5.0, metadata=f.dec.metadata
            )
        with contextlib.suppress(KeyError):  # the Conductor forgot it (worker removed)
            if f.admitted:
                self.conductor.on_decode_done(f.rid, now)
            else:
                self.conductor.cancel(f.rid, now)


@dataclass(slots=True)
class _Flight:
    """One admitted request as the steps of :meth:`FrontDoor._run` hand it on.

    ``reserved`` (the decode reservation until Admit owns it) and ``admitted`` (in the
    Conductor's decode batch) say what the clean-up must undo.
    """

    rid: str
    d: Decision
    tokens: list[int]
    keys: tuple[int, ...]
    req: CompletionRequest
    arrival: float
    pre: WorkerLink
    dec: WorkerLink
    reserved: pb.PrepareReply | None = None
    admitted: bool = False
    times: list[float] = field(default_factory=list)
    """Arrival time of each generated token (for the TBT)."""


_DONE = object()


class CompletionStream:
    """Runs one request in its own task and hands its chunks over through a queue.

    An HTTP client can vanish mid-stream; a response generator that is simply dropped
    would leave the request suspended forever (its decode slot never freed in the
    Conductor). The task drives :meth:`FrontDoor.complete` to the end on its own, and
    ``disconnected`` (polled after each chunk) or :meth:`cancel` stops it cleanly (the
    decode worker is told to cancel, the Conductor forgets the request).

    Args:
        chunks: the request's generator (from :meth:`FrontDoor.complete`).
        disconnected: async predicate, true once the consumer is gone.
    """

    def __init__(
        self,
        chunks: AsyncIterator[CompletionChunk],
        disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self._q: asyncio.Queue[object] = asyncio.Queue()
        self._task = asyncio.create_task(self._pump(chunks, disconnected))

    async def _pump(
        self,
        chunks: AsyncIterator[CompletionChunk],
        disconnected: Callable[[], Awaitable[bool]] | None,
    ) -> None:
        try:
            async for ch in chunks:
                self._q.put_nowait(ch)
                if disconnected is not None and await disconnected():
                    break
        except Exception as exc:  # handed to the consumer
            self._q.put_nowait(exc)
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            self._q.put_nowait(_DONE)

    def __aiter__(self) -> CompletionStream:
        return self

    async def __anext__(self) -> CompletionChunk:
        item = await self._q.get()
        if item is _DONE:
            self._q.put_nowait(_DONE)  # stay exhausted
            raise StopAsyncIteration
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, CompletionChunk)
        return item

    async def cancel(self) -> None:
        """Stop the request (idempotent) and wait for its clean-up."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def outcome_of(exc: BaseException) -> tuple[Outcome, str]:
    """The audit outcome and its detail for a request that ended with ``exc``.

    Args:
        exc: what ended the request in the front door.

    Returns:
        ``("rejected", "<reason>: <detail>")`` for :class:`Rejected` (the reason code
        first, as in ``reject_reason``); ``("failed", text)`` for :class:`ServingError`
        and any other ``Exception``; ``("cancelled", why)`` for a cancelled task, a
        closed stream (the client went away) or an interpreter shutdown.
    """
    if isinstance(exc, Rejected):
        return "rejected", f"{exc.reason}: {exc.detail}"
    if isinstance(exc, ServingError):
        return "failed", str(exc)
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled", "request task cancelled"
    if isinstance(exc, GeneratorExit):
        return "cancelled", "stream closed before the last token (client gone)"
    if isinstance(exc, Exception):
        # Not a ServingError but still an error (e.g. a gRPC error of the decode stream
        # after a one-token request): the request did not complete.
        return "failed", f"{type(exc).__name__}: {exc}"
    return "cancelled", type(exc).__name__  # KeyboardInterrupt, SystemExit


def _rpc_text(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code else 'ERROR'}: {details}"
