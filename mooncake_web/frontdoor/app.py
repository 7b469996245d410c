"""FastAPI app: ``POST /v1/completions``, ``POST /v1/chat/completions`` (the model's chat
template), ``GET /v1/models``, ``GET /health``,
``GET /telemetry`` and ``GET /metrics`` (docs/metrics.md)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, StrictBool, StrictInt, model_validator

from mooncake_core.conductor.service import (
    CompletionChunk,
    CompletionRequest,
    CompletionStream,
    ConductorService,
    Rejected,
    ServingError,
)
from mooncake_core.telemetry import telemetry_routes
from mooncake_web.frontdoor.stops import StopMatcher

__all__ = ["ChatBody", "CompletionBody", "create_app"]


_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    # OpenAI fields that would change the answer, with the values that leave it alone.
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "tools": (None, []),
    "response_format": (None, {"type": "text"}),
}


class _OpenAIBody(BaseModel):
    """Unknown fields are ignored, as OpenAI's clients expect; a known one we do not
    implement, set to a value that would change the answer, is a 400 naming it."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_unsupported(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, neutral in _UNSUPPORTED.items():
                if key in data and not any(data[key] == v for v in neutral):
                    raise ValueError(f"{key} is not supported by this server")
        return data


class CompletionBody(_OpenAIBody):
    """Request body of ``POST /v1/completions`` (the OpenAI fields we support)."""

    model: str | None = None
    prompt: str | list[str] | list[StrictInt]
    """Text, a list of texts (one choice each), or token ids."""
    max_tokens: Annotated[StrictInt, Field(ge=1, le=1 << 16)] = 16
    temperature: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    seed: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] = 0
    n: Annotated[StrictInt, Field(ge=1, le=16)] = 1
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: StrictBool = False
    stop_at_eos: StrictBool | None = None
    """Stop at the model's EOS; default: yes for a real checkpoint, no for the random
    model (whose EOS means nothing)."""


class ChatMessage(BaseModel):
    """One message of a chat (text content only)."""

    role: Literal["system", "user", "assistant"]
    content: str


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage."""

    include_usage: bool = False


class ChatBody(_OpenAIBody):
    """Request body of ``POST /v1/chat/completions`` (the OpenAI fields we support)."""

    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[StrictInt | None, Field(ge=1, le=1 << 16)] = None
    max_completion_tokens: Annotated[StrictInt | None, Field(ge=1, le=1 << 16)] = None
    temperature: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    seed: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] = 0
    n: Annotated[StrictInt, Field(ge=1, le=16)] = 1
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None


def _chat_prompt(tokenizer: Any, messages: list[ChatMessage]) -> str:
    msgs = [{"role": m.role, "content": m.content} for m in messages]
    if hasattr(tokenizer, "apply_chat_template"):
        return str(tokenizer.apply_chat_template(msgs))
    # The byte-level test model has no template: a plain transcript.
    return "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant: "


def _finish(fd: Any, chunks: list[CompletionChunk]) -> str:
    return "stop" if chunks[-1].token == fd.eos_token else "length"


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Any:
    return JSONResponse(
        {"error": {"type": kind, "message": message}}, status_code=status, headers=headers
    )


def _usage(prompt_tokens: int, chunks: list[CompletionChunk]) -> dict[str, Any]:
    last = chunks[-1]
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(chunks),
        "total_tokens": prompt_tokens + len(chunks),
        "cached_tokens": last.reused_tokens,
        "computed_tokens": last.computed_tokens,
        # Where OpenAI's clients (and vLLM, SGLang) put the prompt tokens served from a
        # cache; the two fields above stay for our own tools.
        "prompt_tokens_details": {"cached_tokens": last.reused_tokens},
    }


def create_app(service: ConductorService) -> FastAPI:
    """The front door app over a started :class:`ConductorService`."""
    app = FastAPI(title="mooncake conductor", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Any:
        # OpenAI's shape and status for a malformed body (FastAPI's is 422 {"detail"}).
        e = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        return _error(400, "invalid_request_error", f"{where}: {msg}" if where else msg)

    router = APIRouter(tags=["front door"])

    def front() -> Any:
        if service.front is None:
            raise RuntimeError("conductor not started")
        return service.front

    @router.get("/health")
    async def health() -> dict[str, Any]:
        return service.health()

    pages = telemetry_routes(service.telemetry)

    # async handlers: the snapshots are read on the loop's thread, the only one that
    # touches the Conductor.
    @router.get("/telemetry")
    async def telemetry() -> Response:
        status, ctype, body = pages["/telemetry"]()
        return Response(content=body, media_type=ctype, status_code=status)

    @router.get("/metrics")
    async def metrics() -> Response:
        status, ctype, body = pages["/metrics"]()
        return Response(content=body, media_type=ctype, status_code=status)

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": service.cluster.model.name,
                    "object": "model",
                    "created": int(service.started_at),
                    "owned_by": "mooncake",
                }
            ],
        }

    @router.post("/v1/completions")
    async def completions(body: CompletionBody, request: Request) -> Any:
        fd = front()
        if body.model is not None and body.model != service.cluster.model.name:
            return _error(404, "model_not_found", f"model {body.model!r} is not served here")
        name = service.cluster.model.name
        stops = _stops(body.stop)
        prompts: list[str | tuple[int, ...]]
        if isinstance(body.prompt, str):
            prompts = [body.prompt]
        elif body.prompt and all(isinstance(x, str) for x in body.prompt):
            prompts = [str(x) for x in body.prompt]
        else:
            prompts = [tuple(int(x) for x in body.prompt)]
        stop_at_eos = body.stop_at_eos
        if stop_at_eos is None:
            stop_at_eos = service.cluster.model.checkpoint is not None
        reqs: list[CompletionRequest] = []
        try:
            for pr in prompts:
                for k in range(body.n):
                    text = pr if isinstance(pr, str) else None
                    ids = pr if not isinstance(pr, str) else None
                    reqs.append(
                        CompletionRequest(
                            prompt=text,
                            token_ids=ids,
                            max_tokens=body.max_tokens,
                            temperature=body.temperature,
                            seed=body.seed + k,
                            stop_at_eos=stop_at_eos,
                            top_p=body.top_p,
                        )
                    )
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc))
        if body.stream and len(reqs) > 1:
            return _error(400, "invalid_request_error", "stream supports one prompt and n=1 only")
        created = int(time.time())
        if body.stream:
            req = reqs[0]
            rid = fd.new_request_id()
            gen = fd.stream(req, rid)
            started = await _first(gen)
            if not isinstance(started, CompletionChunk):
                return started
            return _RequestStream(
                gen,
                _sse(fd, started, gen, created, name, _prompt_len(fd, req), stops),
                media_type="text/event-stream",
                headers={"X-Request-Id": rid},
            )
        choices: list[dict[str, Any]] = []
        usage: dict[str, Any] = {}
        first: CompletionChunk | None = None
        last: CompletionChunk | None = None
        for i, req in enumerate(reqs):
            got = await _collect(fd, req, stops)
            if not isinstance(got, tuple):
                return got
            chunks, text, finish = got
            first = first or chunks[0]
            last = chunks[-1]
            choices.append(
                {
                    "index": i,
                    "text": text,
                    "token_ids": [c.token for c in chunks],
                    "finish_reason": finish,
                }
            )
            _add_usage(usage, _usage(_prompt_len(fd, req), chunks))
        assert first is not None and last is not None
        return {
            "id": first.request_id,
            "object": "text_completion",
            "created": created,
            "model": name,
            "choices": choices,
            "usage": usage,
            "timing": {
                "ttft_s": first.ttft_s,
                "tbt_s": last.tbt_s,
                "prefill": first.prefill,
                "decode": first.decode,
            },
        }

    @router.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody, request: Request) -> Any:
        fd = front()
        name = service.cluster.model.name
        if body.model is not None and body.model != name:
            return _error(404, "model_not_found", f"model {body.model!r} is not served here")
        try:
            prompt = _chat_prompt(fd.tokenizer, body.messages)
            req = CompletionRequest(
                prompt=prompt,
                max_tokens=body.max_completion_tokens or body.max_tokens or 256,
                temperature=body.temperature,
                seed=body.seed,
                stop_at_eos=True,
                top_p=body.top_p,
            )
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc))
        stops = _stops(body.stop)
        created = int(time.time())
        prompt_tokens = len(fd.tokenizer.encode(prompt))
        if body.stream:
            if body.n > 1:
                return _error(400, "invalid_request_error", "stream supports n=1 only")
            rid = fd.new_request_id()
            gen = fd.stream(req, rid)
            started = await _first(gen)
            if not isinstance(started, CompletionChunk):
                return started
            usage = body.stream_options is not None and body.stream_options.include_usage
            return _RequestStream(
                gen,
                _chat_sse(fd, started, gen, created, name, prompt_tokens, usage, stops),
                media_type="text/event-stream",
                headers={"X-Request-Id": rid},
            )
        choices: list[dict[str, Any]] = []
        total: dict[str, Any] = {}
        rid0 = ""
        for i in range(body.n):
            one = dataclasses.replace(req, seed=req.seed + i)
            got = await _collect(fd, one, stops)
            if not isinstance(got, tuple):
                return got
            chunks, text, finish = got
            rid0 = rid0 or chunks[0].request_id
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            )
            _add_usage(total, _usage(prompt_tokens, chunks))
        return {
            "id": rid0,
            "object": "chat.completion",
            "created": created,
            "model": name,
            "choices": choices,
            "usage": total,
        }

    app.include_router(router)
    return app


class _RequestStream(StreamingResponse):
    """An SSE response that stops its request when the client goes away.

    Starlette abandons the body iterator when a send fails (client gone); the request
    would then keep decoding with nobody reading. ``cancel`` after the response, in every
    case, ends it (a no-op for a request that finished).
    """

    def __init__(self, stream: CompletionStream, body: AsyncIterator[bytes], **kw: Any) -> None:
        super().__init__(body, **kw)
        self._stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._stream.cancel()


async def _first(gen: CompletionStream) -> CompletionChunk | Any:
    """The first chunk, or the error response for a request that produced none."""
    try:
        return await gen.__anext__()
    except Rejected as exc:
        retry = max(1, math.ceil(exc.retry_after_s))
        return _error(429, "rejected", f"{exc.reason}: {exc.detail}", {"Retry-After": str(retry)})
    except ValueError as exc:
        return _error(400, "invalid_request_error", str(exc))
    except ServingError as exc:
        return _error(503, "serving_error", str(exc))
    except StopAsyncIteration:
        return _error(503, "serving_error", "no tokens produced")
    except BaseException:
        await gen.cancel()
        raise


def _add_usage(total: dict[str, Any], one: dict[str, Any]) -> None:
    # Sums the counts of several choices (None, unknown, stays None only if all are).
    for key, v in one.items():
        if isinstance(v, dict):
            _add_usage(total.setdefault(key, {}), v)
        elif v is None:
            total.setdefault(key, None)
        else:
            total[key] = (total.get(key) or 0) + v


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _prompt_len(fd: Any, req: CompletionRequest) -> int:
    if req.token_ids is not None:
        return len(req.token_ids)
    return len(fd.tokenizer.encode(req.prompt or ""))


async def _collect(
    fd: Any, req: CompletionRequest, stops: list[str]
) -> tuple[list[CompletionChunk], str, str] | Any:
    """Run one request to its end: chunks, text (cut at a stop string), finish reason."""
    gen = fd.stream(req, fd.new_request_id())
    started = await _first(gen)
    if not isinstance(started, CompletionChunk):
        return started
    chunks = [started]
    m = StopMatcher(stops)
    text = m.push(started.text)
    try:
        if not m.stopped:
            async for ch in gen:
                chunks.append(ch)
                text += m.push(ch.text)
                if m.stopped:
                    break
    except ServingError as exc:
        return _error(503, "serving_error", str(exc))
    finally:
        await gen.cancel()  # stops a request cut by a stop string; no-op when finished
    text += m.flush()
    return chunks, text, "stop" if m.stopped else _finish(fd, chunks)


async def _chat_sse(
    fd: Any,
    first: CompletionChunk,
    gen: AsyncIterator[CompletionChunk],
    created: int,
    model: str,
    prompt_tokens: int,
    include_usage: bool,
    stops: list[str],
) -> AsyncIterator[bytes]:
    chunks = [first]
    m = StopMatcher(stops)

    def event(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        doc: dict[str, Any] = {
            "id": first.request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
        }
        if usage is not None:
            doc["usage"] = usage
        return f"data: {json.dumps(doc)}\n\n".encode()

    def delta(ch: CompletionChunk, role: bool) -> bytes:
        text = m.push(ch.text)
        if ch.finished and not m.stopped:
            text += m.flush()
        d: dict[str, Any] = {"content": text}
        if role:
            d["role"] = "assistant"
        finish = "stop" if m.stopped else (_finish(fd, chunks) if ch.finished else None)
        return event([{"index": 0, "delta": d, "finish_reason": finish}])

    yield delta(first, True)
    try:
        if not m.stopped:
            async for ch in gen:
                chunks.append(ch)
                yield delta(ch, False)
                if m.stopped:
                    break
    except ServingError as exc:
        err = {"error": {"type": "serving_error", "message": str(exc)}}
        yield f"data: {json.dumps(err)}\n\n".encode()
    if include_usage:
        yield event([], _usage(prompt_tokens, chunks))
    yield b"data: [DONE]\n\n"


async def _sse(
    fd: Any,
    first: CompletionChunk,
    gen: AsyncIterator[CompletionChunk],
    created: int,
    model: str,
    prompt_tokens: int,
    stops: list[str],
) -> AsyncIterator[bytes]:
    chunks = [first]
    m = StopMatcher(stops)

    def event(ch: CompletionChunk) -> bytes:
        text = m.push(ch.text)
        if ch.finished and not m.stopped:
            text += m.flush()
        done = ch.finished or m.stopped
        finish = "stop" if m.stopped else (_finish(fd, chunks) if ch.finished else None)
        doc: dict[str, Any] = {
            "id": ch.request_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "text": text, "token_ids": [ch.token], "finish_reason": finish}
            ],
        }
        if ch.ttft_s is not None:
            doc["timing"] = {"ttft_s": ch.ttft_s, "prefill": ch.prefill, "decode": ch.decode}
        if done:
            doc["usage"] = _usage(prompt_tokens, chunks)
            doc.setdefault("timing", {})["tbt_s"] = ch.tbt_s
        return f"data: {json.dumps(doc)}\n\n".encode()

    yield event(first)
    try:
        if not m.stopped:
            async for ch in gen:
                chunks.append(ch)
                yield event(ch)
                if m.stopped:
                    break
    except ServingError as exc:
        err = {"error": {"type": "serving_error", "message": str(exc)}}
        yield f"data: {json.dumps(err)}\n\n".encode()
    yield b"data: [DONE]\n\n"
