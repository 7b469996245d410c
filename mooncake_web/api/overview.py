"""``/api/overview`` and ``/api/view``: components, health, alerts; the whole view."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from mooncake_core.telemetry import ClusterView, to_plain

from ..alerts import alerts
from ..deps import BackendDep, ReadAccess

router = APIRouter(prefix="/api", tags=["overview"])


def overview_doc(view: ClusterView) -> dict[str, Any]:
    """The Overview page's data (also pushed over SSE)."""
    st, sc = view.store, view.scheduler
    return {
        "taken_at": view.taken_at,
        "nodes_up": view.nodes_up,
        "nodes": to_plain(view.nodes),
        "alerts": to_plain(alerts(view)),
        "store": {
            "available": st.available,
            "capacity": st.capacity,
            "used": st.used,
            "keys": st.keys,
            "clients": st.clients,
            "key_pins": st.key_pins,
            "prefix_pins": st.prefix_pins,
            "hit_rate": st.hit_rate,
        },
        "scheduler": {
            "available": sc.available,
            "source": sc.source,
            "policy": sc.policy,
            "decisions_total": sc.decisions_total,
            "decisions_per_s": sc.decisions_per_s,
            "rejected_total": sc.rejected_total,
            "ttft_mae_s": sc.ttft_mae_s,
        },
        "nics": {
            "count": len(view.nics),
            "paused": sum(1 for n in view.nics if n.paused),
            "te_bps": sum(n.te_total_bps for n in view.nics),
        },
    }


@router.get("/overview")
async def overview(backend: BackendDep, _: ReadAccess) -> dict[str, Any]:
    """Components with their health, store and scheduler summaries, alerts."""
    return overview_doc(backend.current())


@router.get("/view")
async def whole_view(backend: BackendDep, _: ReadAccess) -> Any:
    """The whole telemetry ClusterView as JSON (what ``mooncake top --json`` reads)."""
    return to_plain(backend.current())


@router.get("/health", tags=["health"])
async def api_health() -> dict[str, str]:
    """Liveness of the dashboard itself."""
    return {"status": "ok"}
