"""``/api/nodes``: components and store nodes; drain (with progress) and undrain."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException

from mooncake_core.cluster.drain import undrain_node
from mooncake_core.store.errors import StoreError
from mooncake_core.telemetry import ClusterView, to_plain

from ..deps import BackendDep, DrainsDep, ReadAccess, WriteAccess
from .errors import node_of, store_http_error

router = APIRouter(prefix="/api/nodes", tags=["nodes"])


def _store_nodes(view: ClusterView) -> dict[str, dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    for s in view.store.segments:
        name = node_of(s.name)
        n = nodes.setdefault(
            name, {"node": name, "capacity": 0, "used": 0, "keys": 0, "segments": []}
        )
        n["capacity"] += s.capacity
        n["used"] += s.used
        n["keys"] += s.keys
        n["segments"].append({"name": s.name, "tier": s.tier, "state": s.state})
    return nodes


def _known(view: ClusterView, node: str) -> dict[str, Any]:
    nodes = _store_nodes(view)
    if node not in nodes:
        raise HTTPException(
            404, f"unknown store node {node!r} (known: {', '.join(sorted(nodes)) or 'none'})"
        )
    return nodes[node]


@router.get("")
async def nodes(backend: BackendDep, drains: DrainsDep, _: ReadAccess) -> dict[str, Any]:
    """Every polled component and every store node (segments, states, last drain)."""
    view = backend.current()
    store = list(_store_nodes(view).values())
    for n in store:
        job = drains.get(n["node"])
        n["drain"] = to_plain(job) if job else None
    return {"taken_at": view.taken_at, "components": to_plain(view.nodes), "store_nodes": store}


@router.get("/{node}")
async def node(node: str, backend: BackendDep, drains: DrainsDep, _: ReadAccess) -> dict[str, Any]:
    """One store node; 404 naming an unknown node."""
    doc = _known(backend.current(), node)
    job = drains.get(node)
    return {**doc, "drain": to_plain(job) if job else None}


@router.post("/{node}/drain", status_code=202)
async def drain(
    node: str, backend: BackendDep, drains: DrainsDep, _: WriteAccess
) -> dict[str, Any]:
    """Drain the node as ``mooncake node drain`` does: its segments go DRAINING (readable,
    no new placement), objects with no replica elsewhere are copied to other nodes, the
    node's replicas are dropped, and it ends DRAINED. Runs in the background; poll
    ``GET /api/nodes/{node}/drain`` for progress. A drain already running is returned."""
    _known(backend.current(), node)
    try:
        job = await drains.start(backend.mc, node, backend.now())
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreError as exc:
        raise store_http_error(exc) from None
    await asyncio.to_thread(backend.poll_once)  # show DRAINING at once
    return to_plain(job)


@router.get("/{node}/drain")
async def drain_progress(
    node: str, backend: BackendDep, drains: DrainsDep, _: ReadAccess
) -> dict[str, Any]:
    """Progress of the node's last drain started here; 404 when none was."""
    _known(backend.current(), node)
    job = drains.get(node)
    if job is None:
        raise HTTPException(404, f"no drain of {node!r} was started from this dashboard")
    return to_plain(job)


@router.post("/{node}/undrain")
async def undrain(
    node: str, backend: BackendDep, drains: DrainsDep, _: WriteAccess
) -> dict[str, Any]:
    """Put the node's DRAINING or DRAINED segments back into placement (MOUNTED), as
    ``mooncake node undrain`` does. A drain of the node running here is stopped first
    (an object copy in flight is revoked; objects already moved stay moved)."""
    _known(backend.current(), node)
    cancelled = await drains.cancel(node)
    try:
        segs = await undrain_node(backend.mc, node)
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreError as exc:
        raise store_http_error(exc) from None
    view = await asyncio.to_thread(backend.poll_once)  # show MOUNTED at once
    states = [s["state"] for s in _store_nodes(view).get(node, {}).get("segments", [])]
    return {"node": node, "segments": segs, "states": states, "drain_cancelled": cancelled}
