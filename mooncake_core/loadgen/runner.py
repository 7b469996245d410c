"""Replay a workload against the front door and measure what clients see.

Each request is sent at its arrival time (divided by ``speed``) unless ``concurrency``
requests are already open, as a streaming completion (SSE); the client measures TTFT
(send -> first token event) and the token intervals itself. 429 answers are counted as
rejections (not retried).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from mooncake_core.loadgen.report import LoadReport, RequestResult, summarize
from mooncake_core.loadgen.workload import LoadRequest

__all__ = ["LoadOptions", "run_load"]


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How to replay.

    Attributes:
        url: front door base URL (``http://127.0.0.1:8000``).
        concurrency: most requests open at once.
        speed: arrival times are divided by it (2.0: twice as fast).
        timeout_s: per-request timeout.
        ttft_slo_s, tbt_slo_s: SLOs for goodput.
    """

    url: str
    concurrency: int = 16
    speed: float = 1.0
    timeout_s: float = 120.0
    ttft_slo_s: float = 30.0
    tbt_slo_s: float = 0.2


async def _one(
    client: httpx.AsyncClient, opts: LoadOptions, req: LoadRequest, sem: asyncio.Semaphore
) -> RequestResult:
    async with sem:
        body = {"prompt": list(req.tokens), "max_tokens": req.max_tokens, "stream": True}
        t0 = time.perf_counter()
        times: list[float] = []
        cached = 0
        try:
            async with client.stream(
                "POST", opts.url + "/v1/completions", json=body, timeout=opts.timeout_s
            ) as resp:
                if resp.status_code == 429:
                    return RequestResult(req.rid, "rejected", len(req.tokens))
                if resp.status_code != 200:
                    await resp.aread()
                    return RequestResult(req.rid, f"http_{resp.status_code}", len(req.tokens))
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    doc = json.loads(line[6:])
                    if "error" in doc:
                        return RequestResult(req.rid, "error", len(req.tokens))
                    times.append(time.perf_counter())
                    usage = doc.get("usage")
                    if usage:
                        cached = usage.get("cached_tokens") or 0
        except httpx.HTTPError:
            return RequestResult(req.rid, "error", len(req.tokens))
        if not times:
            return RequestResult(req.rid, "error", len(req.tokens))
        return RequestResult(
            req.rid, "ok", len(req.tokens), times[0] - t0, tuple(times), cached_tokens=cached
        )


async def run_load(requests: Sequence[LoadRequest], opts: LoadOptions) -> LoadReport:
    """Send every request and summarise.

    Raises:
        ValueError: bad options.
    """
    if opts.concurrency < 1 or opts.speed <= 0:
        raise ValueError("concurrency must be >= 1 and speed > 0")
    sem = asyncio.Semaphore(opts.concurrency)
    limits = httpx.Limits(max_connections=opts.concurrency + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        start = time.perf_counter()

        async def at(req: LoadRequest) -> RequestResult:
            delay = req.arrival_s / opts.speed - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            return await _one(client, opts, req, sem)

        results = await asyncio.gather(*(at(r) for r in requests))
        wall = time.perf_counter() - start
    return summarize(results, wall, opts.ttft_slo_s, opts.tbt_slo_s)
