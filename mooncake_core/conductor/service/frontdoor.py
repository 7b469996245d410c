"""The front door's logic: one completion request through schedule, prefill and decode.

The HTTP adapter (``mooncake_web/frontdoor``) only translates JSON/SSE to and from
:meth:`FrontDoor.complete`; everything else is here, on the conductor's event loop:

```
complete(req)
  tokens -> block keys -> Conductor.schedule -> audit.submit_source
  rejected?  -> audit row committed -> raise Rejected(retry_after)   (HTTP 429)
  audit row committed            (a SIGKILL now cannot lose the decision of a dispatched request)
  decode.Prepare(len, max_tokens) reserve the prompt's and the decode's blocks
  prefill.Prefill(tokens, fetch keys, target blocks)   sent after the previous request's
                                  (per instance: the worker runs them in the Conductor's order)
        worker: Store fetch -> incremental prefill -> layer-wise store + KV WRITEs
  yield first token                                               (TTFT)
  on_prefill_done, on_actual(TTFT + the worker's timings: calibration), on_decode_join
  decode.Admit(...) stream -> yield tokens                        (TBT)
  on_decode_done, on_actual, audit.update_actual
  every end (done, 429, error, cancel) -> audit.record_outcome
  done, 429 or error: outcome committed before the answer ends
```

"Committed" waits for the audit writer's next group commit (``AuditWriter.when_written``,
about a millisecond), at most ``audit_wait_s``: a database that hangs slows requests by
that much, never stops them (counted in ``FrontDoorStats.audit_unconfirmed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from mooncake_core.conductor.calibration import PrefillTimings
from mooncake_core.conductor.decision import Decision, ScheduleRequest
from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.conductor.scheduler import Conductor
from mooncake_core.conductor.service.links import WorkerLink
from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.worker.bpe_tokenizer import IncrementalDecoder, TextTokenizer
from mooncake_core.worker.tokenizer import ByteTokenizer

if TYPE_CHECKING:
    from mooncake_core.conductor.audit.records import Outcome
    from mooncake_core.conductor.audit.writer import AuditWriter

__all__ = [
    "CompletionChunk",
    "CompletionRequest",
    "CompletionStream",
    "FrontDoor",
    "FrontDoorStats",
    "Rejected",
    "ServingError",
    "outcome_of",
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
        audit: AuditWriter | None = None,
        store_kv: bool = True,
        rpc_timeout_s: float = 60.0,
        model_name: str = "mooncake-tiny",
        vocab_size: int = 259,
        cpp_threshold: int = 0,
        cpp_chunk_tokens: int = 256,
        audit_wait_s: float = 2.0,
        tokenizer: TextTokenizer | None = None,
        max_seq_len: int | None = None,
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
        if req.token_ids is not None:
            tokens = list(req.token_ids)
        else:
            tokens = self.tokenizer.encode(req.prompt or "")
        vocab = self.vocab_size
        if any(not 0 <= t < vocab for t in tokens):
            raise ValueError(f"token ids must be in [0, {vocab})")
        limit = self.max_seq_len
        if limit is not None and len(tokens) + req.max_tokens > limit:
            # Can never fit: refused now (400), not admitted to fail after decoding.
            raise ValueError(
                f"prompt ({len(tokens)} tokens) + max_tokens ({req.max_tokens}) exceeds"
                f" the model's max_seq_len ({limit})"
            )
        keys = tuple(self.hasher.block_keys(tokens))
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
        if not d.admitted:
            self.stats.rejected += 1
            self.stats.by_reason[d.reason] = self.stats.by_reason.get(d.reason, 0) + 1
            detail = d.admission.detail
            if self.audit is not None:
                self.audit.record_outcome(rid, "rejected", f"{d.reason}: {detail}")
                await self._audit_committed()
            raise Rejected(d.reason, detail, d.retry_after_s or 1.0)
        async for chunk in self._run(rid, d, tokens, keys, req, arrival):
            yield chunk

    async def _run(
        self,
        rid: str,
        d: Decision,
        tokens: list[int],
        keys: tuple[int, ...],
        req: CompletionRequest,
        arrival: float,
    ) -> AsyncIterator[CompletionChunk]:
        c = self.conductor
        assert d.prefill is not None and d.decode is not None
        pre, dec = self._link(d.prefill), self._link(d.decode)
        sampling = pb.Sampling(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            seed=req.seed,
            stop_at_eos=req.stop_at_eos,
            top_p=req.top_p,
        )
        q = self._fifo.setdefault(d.prefill, deque())
        q.append(rid)
        if len(q) == 1:
            self._start_next(d.prefill, time.time())
        before = self._sends.get(d.prefill)
        mine = self._sends[d.prefill] = asyncio.Event()
        reserved: pb.PrepareReply | None = None
        admitted = False
        finished = False
        try:
            await self._audit_committed()  # nothing is dispatched for a decision not on disk
            try:
                reserved = await dec.stub.Prepare(
                    pb.PrepareRequest(
                        request_id=rid, num_tokens=len(tokens), max_tokens=req.max_tokens
                    ),
                    timeout=self.rpc_timeout_s,
                    metadata=dec.metadata,
                )
                fetch: tuple[int, ...] = ()
                if d.prefix_blocks > d.local_blocks:
                    fetch = keys[: d.prefix_blocks]
                target = pb.DecodeTarget(
                    instance=d.decode,
                    segment=reserved.segment,
                    seq_id=reserved.seq_id,
                    blocks=list(reserved.blocks),
                    block_nbytes=reserved.block_nbytes,
                    layer_nbytes=reserved.layer_nbytes,
                )
                if before is not None and not before.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(before.wait(), self.rpc_timeout_s)
                prefill_call = pre.stub.Prefill(
                    pb.PrefillRequest(
                        request_id=rid,
                        tokens=tokens,
                        sampling=sampling,
                        fetch_keys=list(fetch),
                        fetch_source=d.migration.source if d.migration else "",
                        target=target,
                        store_kv=self.store_kv,
                        cpp_peer=self._cpp_peer(d.prefill, len(tokens)),
                        cpp_chunk_tokens=self.cpp_chunk_tokens,
                    ),
                    timeout=self.rpc_timeout_s,
                    metadata=pre.metadata,
                )
                self._sent(d.prefill, mine)  # the call is started: the next may follow
                rep = await prefill_call
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    # A KV pool is full: overload, like an admission rejection (the
                    # Conductor counts batch slots, not KV blocks).
                    where = "decode" if reserved is None else "prefill"
                    self.stats.kv_full += 1
                    raise Rejected(f"{where}_kv_full", _rpc_text(exc), 1.0) from None
                raise ServingError(f"{_rpc_text(exc)}") from None
            now = time.time()
            ttft = now - arrival
            self._leave_fifo(d.prefill, rid, now)
            try:
                c.on_prefill_done(rid, now, actual_transfer_s=rep.fetch_s if fetch else None)
            except KeyError:
                raise ServingError(f"request dropped: {d.prefill} was removed") from None
            # The calibration learns as soon as the TTFT is known, from the worker's parts.
            c.on_actual(rid, ttft, timings=timings_of(rep))
            st = self.stats
            st.reused_tokens += rep.reused_tokens
            st.computed_tokens += rep.computed_tokens
            st.fetched_blocks += rep.fetched_blocks
            st.stored_blocks += rep.stored_blocks
            times = [now]
            text = IncrementalDecoder(self.tokenizer)  # never splits a UTF-8 character
            first_done = req.max_tokens == 1 or (
                req.stop_at_eos and rep.first_token == self.tokenizer.eos
            )
            try:
                # The worker reserved the KV blocks at Prepare and the KV is in them now:
                # the request decodes there (the Conductor's own estimate must not move it).
                join = c.on_decode_join(rid, now, placed=True)
            except KeyError:
                raise ServingError(f"request dropped: {d.decode} was removed") from None
            if not join.admitted:
                raise ServingError(f"rejected at decode join: {join.reason}")
            admitted = True
            first = CompletionChunk(
                rid,
                rep.first_token,
                text.push(rep.first_token) + (text.flush() if first_done else ""),
                0,
                first_done,
                d.prefill,
                d.decode,
                ttft_s=ttft,
                reused_tokens=rep.reused_tokens if first_done else None,
                computed_tokens=rep.computed_tokens if first_done else None,
            )
            call: Any = dec.stub.Admit(
                pb.AdmitRequest(
                    request_id=rid,
                    seq_id=reserved.seq_id,
                    tokens=tokens,
                    next_token=rep.first_token,
                    sampling=sampling,
                ),
                metadata=dec.metadata,
            )
            reserved = None  # Admit owns the reservation now (it aborts on failure)
            if first_done:
                finished = True
                yield first
                async for _ in call:  # lets the worker retire the sequence
                    pass
            else:
                yield first
                try:
                    async for ev in call:
                        times.append(time.time())
                        last = ev.finished
                        tbt = tbt_of(times) if last else None
                        finished = last
                        yield CompletionChunk(
                            rid,
                            ev.token,
                            text.push(ev.token) + (text.flush() if last else ""),
                            ev.index,
                            last,
                            d.prefill,
                            d.decode,
                            tbt_s=tbt,
                            reused_tokens=rep.reused_tokens if last else None,
                            computed_tokens=rep.computed_tokens if last else None,
                        )
                except grpc.RpcError as exc:
                    raise ServingError(f"decode stream: {_rpc_text(exc)}") from None
            if not finished:
                raise ServingError(f"decode {d.decode} ended the stream before the last token")
            end = time.time()
            admitted = False
            tbt_final = tbt_of(times)
            with contextlib.suppress(KeyError):  # forgotten if its decode worker was removed
                c.on_decode_done(rid, end)
                c.on_actual(rid, None, tbt_final)
            if self.audit is not None:
                self.audit.update_actual(rid, ttft, tbt_final)
                self.audit.record_outcome(rid, "completed")
            self.stats.completed += 1
        except BaseException as exc:
            self._sent(d.prefill, mine)
            outcome, detail = outcome_of(exc)
            if self.audit is not None:
                # Before the clean-up: it awaits, and a second cancellation there must not
                # lose the record. record_outcome only appends to a queue.
                self.audit.record_outcome(rid, outcome, detail)
            # The counters classify exactly as the audit does (outcome_of).
            if isinstance(exc, Rejected):
                self.stats.rejected += 1
                self.stats.by_reason[exc.reason] = self.stats.by_reason.get(exc.reason, 0) + 1
            elif outcome == "failed":
                self.stats.failed += 1
                log.warning("request %s failed: %s", rid, detail)
            else:
                self.stats.cancelled += 1
            await self._cleanup(rid, d, dec, reserved, admitted)
            if isinstance(exc, Exception):  # a 429 or 503 is answered after its outcome is
                await self._audit_committed()
            raise
        # The answer ends (the last chunk of a stream, the whole body otherwise) once the
        # outcome is committed.
        await self._audit_committed()

    async def _cleanup(
        self,
        rid: str,
        d: Decision,
        dec: WorkerLink,
        reserved: pb.PrepareReply | None,
        admitted: bool,
    ) -> None:
        now = time.time()
        assert d.prefill is not None
        self._leave_fifo(d.prefill, rid, now)
        with contextlib.suppress(grpc.RpcError):
            await dec.stub.Cancel(
                pb.CancelRequest(request_id=rid), timeout=5.0, metadata=dec.metadata
            )
        with contextlib.suppress(KeyError):  # the Conductor forgot it (worker removed)
            if admitted:
                self.conductor.on_decode_done(rid, now)
            else:
                self.conductor.cancel(rid, now)


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


def _rpc_text(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code else 'ERROR'}: {details}"
