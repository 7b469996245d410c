"""``/api/scheduler``: decisions/s, TTFT predicted vs actual, rejections, queues."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from mooncake_core.telemetry import to_plain

from ..deps import BackendDep, ReadAccess
from .audit import reader

router = APIRouter(prefix="/api", tags=["scheduler"])


@router.get("/scheduler")
def scheduler(
    backend: BackendDep,
    _: ReadAccess,
    window_s: float = Query(600.0, gt=0, le=7 * 86400, description="History window, seconds."),
    bucket_s: float = Query(10.0, gt=0, le=86400, description="Bucket width, seconds."),
) -> dict[str, Any]:
    """The conductor's telemetry plus, from the audit database, decisions and rejections
    per bucket and the last predicted/actual TTFT pairs."""
    from mooncake_core.conductor.audit import DecisionFilter

    view = backend.current()
    doc: dict[str, Any] = {"taken_at": view.taken_at, **to_plain(view.scheduler)}
    doc["rejected_total"] = view.scheduler.rejected_total
    doc["window_s"], doc["bucket_s"] = window_s, bucket_s
    doc["buckets"], doc["ttft_pairs"], doc["audit"] = [], [], backend.audit_url is not None
    if backend.audit_url is None:
        return doc
    with reader(backend) as r:
        flt = DecisionFilter(since=view.taken_at - window_s, limit=None)
        stats = r.stats(bucket_s, flt)
        recent = r.find(DecisionFilter(limit=200))
    doc["buckets"] = [
        {
            "start": b.start,
            "decisions": b.decisions,
            "per_s": b.decisions / bucket_s,
            "rejected": b.rejected,
            "ttft_mae_s": b.ttft_mae_s,
        }
        for b in stats.buckets
    ]
    doc["ttft_pairs"] = [
        {
            "request_id": d.decision.request_id,
            "predicted_s": d.decision.predicted_ttft_s,
            "actual_s": d.decision.actual_ttft_s,
        }
        for d in recent
        if d.decision.predicted_ttft_s is not None and d.decision.actual_ttft_s is not None
    ]
    return doc
