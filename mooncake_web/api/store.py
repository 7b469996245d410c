"""``/api/store``: capacity per node and tier, the object browser, pins."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from mooncake_core.store.errors import StoreError

from ..deps import BackendDep, ReadAccess, WriteAccess
from .errors import check_limit, check_prefix, compile_regex, node_of, store_http_error

router = APIRouter(prefix="/api/store", tags=["store"])


class PinBody(BaseModel):
    """A pin to set."""

    target: str = Field(min_length=1, max_length=1024, description="Key prefix, or key.")
    prefix: bool = Field(True, description="True: pin every key under target.")
    hard: bool = Field(False, description="Hard pin: never evicted, no TTL.")
    ttl_s: float | None = Field(
        None, gt=0, le=30 * 86400, description="Soft pin lifetime (default: master's)."
    )


def _pin_doc(p: Any) -> dict[str, Any]:
    left = None if p.expires_at is None else round(max(0.0, p.expires_at - time.monotonic()), 1)
    return {"target": p.target, "prefix": p.is_prefix, "hard": p.hard, "remaining_s": left}


@router.get("/capacity")
async def capacity(backend: BackendDep, _: ReadAccess) -> dict[str, Any]:
    """Capacity and use per store node and tier, and per segment (from telemetry)."""
    st = backend.current().store
    per: dict[tuple[str, str], dict[str, Any]] = {}
    for s in st.segments:
        node = node_of(s.name)
        row = per.setdefault(
            (node, s.tier),
            {"node": node, "tier": s.tier, "capacity": 0, "used": 0, "keys": 0, "states": []},
        )
        row["capacity"] += s.capacity
        row["used"] += s.used
        row["keys"] += s.keys
        row["states"].append(s.state)
    return {
        "available": st.available,
        "capacity": st.capacity,
        "used": st.used,
        "keys": st.keys,
        "processing": st.processing,
        "evicted_total": st.evicted_total,
        "hit_rate": st.hit_rate,
        "nodes": sorted(per.values(), key=lambda r: (r["node"], r["tier"])),
        "tiers": [{"tier": t, "capacity": c, "used": u} for t, c, u in st.tiers],
        "segments": [
            {
                "name": s.name,
                "node": node_of(s.name),
                "client": s.client,
                "tier": s.tier,
                "state": s.state,
                "capacity": s.capacity,
                "used": s.used,
                "keys": s.keys,
            }
            for s in st.segments
        ],
    }


def _rows(entries: Any, pattern: Any) -> list[dict[str, Any]]:
    return [
        {"key": e.key, "size": e.size, "state": e.state.name}
        for e in entries
        if pattern is None or pattern.search(e.key)
    ]


@router.get("/objects")
async def objects(
    backend: BackendDep,
    _: ReadAccess,
    prefix: str = Query("", description="Key prefix."),
    regex: str | None = Query(None, description="Keep keys of this page matching it."),
    start_after: str = Query("", description="Cursor: list keys after this one."),
    limit: int = Query(50, description="Page size (capped; see the 422 message)."),
) -> dict[str, Any]:
    """One page of objects in key order. ``next_start_after`` is the next page's cursor.

    422 for a malformed prefix or regex, or a page size over the cap.
    """
    check_prefix(prefix)
    check_prefix(start_after, "start_after")
    check_limit(limit, backend.opts.page_cap)
    pattern = compile_regex(regex) if regex else None
    try:
        page = await backend.mc.list_keys(prefix, start_after, limit)
    except StoreError as exc:
        raise store_http_error(exc) from None
    # RE2 is linear, but a 1000-key page is still work: keep it off the event loop so
    # /health and the SSE stream never wait on a filter.
    rows = await asyncio.to_thread(_rows, page.entries, pattern)
    return {"entries": rows, "next_start_after": page.next_start_after, "limit": limit}


@router.get("/objects/{key:path}")
async def object_info(key: str, backend: BackendDep, _: ReadAccess) -> dict[str, Any]:
    """Size, state, replicas, lease and pin of one object; 404 naming an unknown key."""
    check_prefix(key, "key")
    try:
        i = await backend.mc.stat(key)
    except StoreError as exc:
        raise store_http_error(exc) from None
    return {
        "key": i.key,
        "size": i.size,
        "state": i.state.name,
        "replicas": [[[s.segment, s.offset, s.length] for s in r] for r in i.replicas],
        "segments": sorted({s.segment for r in i.replicas for s in r}),
        "lease_remaining_s": i.lease_remaining_s,
        "idle_s": i.idle_s,
        "pin": i.pin.name,
        "pin_remaining_s": i.pin_remaining_s,
    }


@router.get("/pins")
async def pins(backend: BackendDep, _: ReadAccess) -> list[dict[str, Any]]:
    """Live pins: keys, then prefixes."""
    try:
        ps = await backend.mc.list_pins()
    except StoreError as exc:
        raise store_http_error(exc) from None
    return [_pin_doc(p) for p in ps]


@router.post("/pins", status_code=201)
async def pin(body: PinBody, backend: BackendDep, _: WriteAccess) -> dict[str, Any]:
    """Pin a prefix (or a key with ``prefix: false``). Needs login and the CSRF header."""
    check_prefix(body.target, "target")
    if body.hard and body.ttl_s is not None:
        raise HTTPException(422, "a hard pin has no TTL; drop ttl_s or hard")
    try:
        p = await backend.mc.pin(body.target, prefix=body.prefix, hard=body.hard, ttl_s=body.ttl_s)
    except StoreError as exc:
        raise store_http_error(exc) from None
    return _pin_doc(p)


@router.delete("/pins")
async def unpin(
    backend: BackendDep,
    _: WriteAccess,
    target: str = Query(min_length=1, description="Exact pinned prefix or key."),
    prefix: bool = Query(True, description="True: target is a prefix pin."),
) -> dict[str, Any]:
    """Clear the pin on exactly ``target``; 404 when there is none."""
    check_prefix(target, "target")
    try:
        p = await backend.mc.unpin(target, prefix=prefix)
    except StoreError as exc:
        raise store_http_error(exc) from None
    return _pin_doc(p)
