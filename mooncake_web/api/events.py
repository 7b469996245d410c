"""``/api/events``: Server-Sent Events, one ``view`` event per collector poll."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from mooncake_core.telemetry import ClusterView, to_plain

from ..deps import BackendDep, ReadAccess
from .network import network_doc
from .overview import overview_doc

router = APIRouter(prefix="/api", tags=["events"])


def _event(view: ClusterView, backend: Any) -> str:
    doc = {
        "overview": overview_doc(view),
        "network": network_doc(view, backend),
        "scheduler": to_plain(view.scheduler),
        "store": to_plain(view.store),
    }
    return f"event: view\ndata: {json.dumps(doc, separators=(',', ':'))}\n\n"


@router.get("/events", response_class=StreamingResponse)
async def events(
    request: Request, backend: BackendDep, _: ReadAccess, once: bool = False
) -> StreamingResponse:
    """A ``text/event-stream``: an event named ``view`` (JSON with ``overview``,
    ``network``, ``scheduler`` and ``store``) after every poll; ``once`` ends the stream
    after the first event (for scripts and tests)."""

    async def stream() -> AsyncIterator[str]:
        seen = -1
        yield "retry: 2000\n\n"
        while not await request.is_disconnected():
            if backend.version != seen:
                seen = backend.version
                yield _event(backend.current(), backend)
                if once:
                    return
            await asyncio.sleep(min(0.25, backend.opts.interval_s / 2))

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
