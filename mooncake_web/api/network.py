"""``/api/network``: per-NIC bandwidth (with chart history) per node, paused NICs, and
per-transport traffic (shm included, which no NIC sees)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from mooncake_core.telemetry import ClusterView, to_plain

from ..backend import Backend
from ..deps import BackendDep, ReadAccess

router = APIRouter(prefix="/api", tags=["network"])


def network_doc(view: ClusterView, backend: Backend, node: str | None = None) -> dict[str, Any]:
    """NICs grouped by node, each with its recent ``[t, tx, rx]`` samples."""
    nodes: dict[str, list[dict[str, Any]]] = {}
    for nic in view.nics:
        if node is not None and nic.node != node:
            continue
        doc = to_plain(nic)
        doc["points"] = [[p.t, p.tx, p.rx] for p in backend.nic_history(nic.node, nic.nic)]
        nodes.setdefault(nic.node, []).append(doc)
    return {
        "taken_at": view.taken_at,
        "nodes": [{"node": n, "nics": nics} for n, nics in nodes.items()],
        "paused": [f"{n.node}/{n.nic}" for n in view.nics if n.paused],
        "host_nics": to_plain(view.host_nics) if node is None else [],
        "transports": to_plain(tuple(t for t in view.transports if node is None or t.node == node)),
    }


@router.get("/network")
async def network(backend: BackendDep, _: ReadAccess) -> dict[str, Any]:
    """Every node's Transfer Engine NICs: rates, history, errors, paused and slow flags."""
    return network_doc(backend.current(), backend)


@router.get("/network/{node}")
async def network_node(node: str, backend: BackendDep, _: ReadAccess) -> dict[str, Any]:
    """One node's NICs; 404 naming the node when no such node reports NICs."""
    view = backend.current()
    known = sorted({n.node for n in view.nics})
    if node not in known:
        raise HTTPException(
            404, f"unknown node {node!r} (nodes with NICs: {', '.join(known) or 'none'})"
        )
    return network_doc(view, backend, node)
