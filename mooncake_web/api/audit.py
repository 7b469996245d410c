"""``/api/audit``: the audit explorer (filter decisions, one decision and its why)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Query

from mooncake_core.telemetry import to_plain

from ..deps import BackendDep, ReadAccess
from .errors import check_limit

if TYPE_CHECKING:
    from mooncake_core.conductor.audit import AuditReader

    from ..backend import Backend

router = APIRouter(prefix="/api/audit", tags=["audit"])


@contextmanager
def reader(backend: Backend) -> Iterator[AuditReader]:
    """An audit reader over the backend's database.

    Raises:
        HTTPException: 503 when there is no database or its schema is not current.
    """
    from mooncake_core.conductor.audit import AuditReader, SchemaError

    if backend.audit_url is None:
        raise HTTPException(503, "no audit database (audit.url does not exist yet)")
    try:
        r = AuditReader.open(backend.audit_url)
    except SchemaError as exc:
        raise HTTPException(503, f"audit database not usable: {exc}") from None
    try:
        yield r
    finally:
        r.close()


def _when(text: str | None, what: str, now: float) -> float | None:
    from mooncake_core.conductor.audit import parse_when

    if text is None or text == "":
        return None
    try:
        return parse_when(text, now)
    except ValueError as exc:
        raise HTTPException(422, f"{what}: {exc}") from None


@router.get("/decisions")
def decisions(
    backend: BackendDep,
    _: ReadAccess,
    since: str | None = Query(None, description="Earliest time: ISO 8601, unix or '15m' ago."),
    until: str | None = Query(None, description="Latest time (exclusive), same forms."),
    request_id: str | None = Query(None, max_length=256, description="Only this request."),
    instance: str | None = Query(None, max_length=256, description="Chose this instance."),
    policy: str | None = Query(None, max_length=128, description="Only this policy."),
    rejected: bool = Query(False, description="Only rejected decisions."),
    limit: int = Query(50, description="Page size (capped; see the 422 message)."),
    offset: int = Query(0, ge=0, description="Skip this many (newest first)."),
) -> dict[str, Any]:
    """Decisions newest first with the matched prefix of the chosen prefill instance,
    and the total matching the filter (for pagination)."""
    from mooncake_core.conductor.audit import DecisionFilter

    check_limit(limit, backend.opts.page_cap)
    now = backend.now()
    flt = DecisionFilter(
        since=_when(since, "since", now),
        until=_when(until, "until", now),
        request_id=request_id or None,
        instance=instance or None,
        policy=policy or None,
        rejected_only=rejected,
        limit=limit,
        offset=offset,
    )
    with reader(backend) as r:
        rows = r.find(flt)
        total = r.count(DecisionFilter(**{**_fields(flt), "limit": None, "offset": 0}))
    return {
        "total": total,
        "limit": limit,
        "offset": offset,
        "decisions": [
            {"id": d.id, **to_plain(d.decision), "matched_prefix_blocks": d.matched_prefix_blocks}
            for d in rows
        ],
    }


def _fields(flt: Any) -> dict[str, Any]:
    return {k: getattr(flt, k) for k in flt.__dataclass_fields__}


@router.get("/decisions/{request_id}")
def decision(request_id: str, backend: BackendDep, _: ReadAccess) -> dict[str, Any]:
    """A request's newest decision: the record, its candidate table and the
    plain-language explanation (as ``mooncake audit explain``); 404 naming an unknown
    request."""
    from mooncake_core.conductor.audit import explain

    with reader(backend) as r:
        entry = r.get(request_id)
    if entry is None:
        raise HTTPException(404, f"no decision for request {request_id!r} in the audit database")
    return {
        "id": entry.id,
        "decision": to_plain(entry.decision),
        "candidates": to_plain(entry.candidates),
        "explanation": explain(entry),
    }
