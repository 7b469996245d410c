"""FastAPI app: ``POST /v1/completions``, ``POST /v1/chat/completions`` (the model's chat
template), ``GET /v1/models``, ``GET /health``,
``GET /telemetry`` and ``GET /metrics`` (docs/metrics.md)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from mooncake_core.conductor.service import (
    CompletionChunk,
    CompletionRequest,
    CompletionStream,
    ConductorService,
    Rejected,
    ServingError,
)
from mooncake_core.telemetry import telemetry_routes

__all__ = ["ChatBody", "CompletionBody", "create_app"]


class CompletionBody(BaseModel):
    """Request body of ``POST /v1/completions`` (the OpenAI fields we support)."""

    model: str | None = None
    prompt: str | list[int]
    """Text (byte tokenizer, BOS first) or token ids."""
    max_tokens: Annotated[int, Field(ge=1, le=1 << 16)] = 16
    temperature: Annotated[float, Field(ge=0, le=100)] = 0.0
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    stream: bool = False
    stop_at_eos: bool = False


class ChatMessage(BaseModel):
    """One message of a chat (text content only)."""

    role: Literal["system", "user", "assistant"]
    content: str


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage."""

    include_usage: bool = False


class ChatBody(BaseModel):
    """Request body of ``POST /v1/chat/completions`` (the OpenAI fields we support)."""

    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int | None, Field(ge=1, le=1 << 16)] = None
    max_completion_tokens: Annotated[int | None, Field(ge=1, le=1 << 16)] = None
    temperature: Annotated[float, Field(ge=0, le=100)] = 0.0
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    stream: bool = False
    stream_options: StreamOptions | None = None


def _chat_prompt(tokenizer: Any, messages: list[ChatMessage]) -> str:
    msgs = [{"role": m.role, "content": m.content} for m in messages]
    if hasattr(tokenizer, "apply_chat_template"):
        return str(tokenizer.apply_chat_template(msgs))
    # The byte-level test model has no template: a plain transcript.
    return "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant: "


def _finish(fd: Any, chunks: list[CompletionChunk]) -> str:
    return "stop" if chunks[-1].token == fd.tokenizer.eos else "length"


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
    }


def create_app(service: ConductorService) -> FastAPI:
    """The front door app over a started :class:`ConductorService`."""
    app = FastAPI(title="mooncake conductor", docs_url=None, redoc_url=None)
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
        try:
            if isinstance(body.prompt, str):
                req = CompletionRequest(
                    prompt=body.prompt,
                    max_tokens=body.max_tokens,
                    temperature=body.temperature,
                    seed=body.seed,
                    stop_at_eos=body.stop_at_eos,
                )
            else:
                req = CompletionRequest(
                    token_ids=tuple(body.prompt),
                    max_tokens=body.max_tokens,
                    temperature=body.temperature,
                    seed=body.seed,
                    stop_at_eos=body.stop_at_eos,
                )
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc))
        rid = fd.new_request_id()
        gen = fd.stream(req, rid)
        try:
            first = await gen.__anext__()
        except Rejected as exc:
            retry = max(1, math.ceil(exc.retry_after_s))
            return _error(
                429, "rejected", f"{exc.reason}: {exc.detail}", {"Retry-After": str(retry)}
            )
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc))
        except ServingError as exc:
            return _error(503, "serving_error", str(exc))
        except StopAsyncIteration:
            return _error(503, "serving_error", "no tokens produced")
        except BaseException:
            await gen.cancel()
            raise
        created = int(time.time())
        prompt_tokens = (
            len(req.token_ids)
            if req.token_ids is not None
            else len(fd.tokenizer.encode(req.prompt or ""))
        )
        if body.stream:
            return _RequestStream(
                gen,
                _sse(first, gen, created, service.cluster.model.name, prompt_tokens),
                media_type="text/event-stream",
                headers={"X-Request-Id": rid},
            )
        chunks = [first]
        try:
            async for ch in gen:
                chunks.append(ch)
        except ServingError as exc:
            return _error(503, "serving_error", str(exc))
        finally:
            await gen.cancel()  # no-op when finished; stops it if this handler was cancelled
        return {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": service.cluster.model.name,
            "choices": [
                {
                    "index": 0,
                    "text": fd.tokenizer.decode([c.token for c in chunks]),
                    "token_ids": [c.token for c in chunks],
                    "finish_reason": _finish(fd, chunks),
                }
            ],
            "usage": _usage(prompt_tokens, chunks),
            "timing": {
                "ttft_s": first.ttft_s,
                "tbt_s": chunks[-1].tbt_s,
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
            )
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc))
        rid = fd.new_request_id()
        gen = fd.stream(req, rid)
        started = await _first(gen)
        if not isinstance(started, CompletionChunk):
            return started
        first = started
        created = int(time.time())
        prompt_tokens = len(fd.tokenizer.encode(prompt))
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return _RequestStream(
                gen,
                _chat_sse(fd, first, gen, created, name, prompt_tokens, usage),
                media_type="text/event-stream",
                headers={"X-Request-Id": rid},
            )
        chunks = [first]
        try:
            async for ch in gen:
                chunks.append(ch)
        except ServingError as exc:
            return _error(503, "serving_error", str(exc))
        finally:
            await gen.cancel()
        return {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": name,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": fd.tokenizer.decode([c.token for c in chunks]),
                    },
                    "finish_reason": _finish(fd, chunks),
                }
            ],
            "usage": _usage(prompt_tokens, chunks),
        }

    app.include_router(router)
    return app


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


async def _chat_sse(
    fd: Any,
    first: CompletionChunk,
    gen: AsyncIterator[CompletionChunk],
    created: int,
    model: str,
    prompt_tokens: int,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    chunks = [first]

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
        d: dict[str, Any] = {"content": ch.text}
        if role:
            d["role"] = "assistant"
        finish = _finish(fd, chunks) if ch.finished else None
        return event([{"index": 0, "delta": d, "finish_reason": finish}])

    yield delta(first, True)
    try:
        async for ch in gen:
            chunks.append(ch)
            yield delta(ch, False)
    except ServingError as exc:
        err = {"error": {"type": "serving_error", "message": str(exc)}}
        yield f"data: {json.dumps(err)}\n\n".encode()
    if include_usage:
        yield event([], _usage(prompt_tokens, chunks))
    yield b"data: [DONE]\n\n"


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


async def _sse(
    first: CompletionChunk,
    gen: AsyncIterator[CompletionChunk],
    created: int,
    model: str,
    prompt_tokens: int,
) -> AsyncIterator[bytes]:
    chunks = [first]

    def event(ch: CompletionChunk, usage: dict[str, Any] | None) -> bytes:
        doc: dict[str, Any] = {
            "id": ch.request_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": ch.text,
                    "token_ids": [ch.token],
                    "finish_reason": "length" if ch.finished else None,
                }
            ],
        }
        if ch.ttft_s is not None:
            doc["timing"] = {"ttft_s": ch.ttft_s, "prefill": ch.prefill, "decode": ch.decode}
        if usage is not None:
            doc["usage"] = usage
            doc.setdefault("timing", {})["tbt_s"] = ch.tbt_s
        return f"data: {json.dumps(doc)}\n\n".encode()

    yield event(first, _usage(prompt_tokens, chunks) if first.finished else None)
    try:
        async for ch in gen:
            chunks.append(ch)
            yield event(ch, _usage(prompt_tokens, chunks) if ch.finished else None)
    except ServingError as exc:
        err = {"error": {"type": "serving_error", "message": str(exc)}}
        yield f"data: {json.dumps(err)}\n\n".encode()
    yield b"data: [DONE]\n\n"
