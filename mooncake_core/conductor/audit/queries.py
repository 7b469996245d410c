"""Read side of the audit: list, show, explain, aggregate and export decisions.

Used by ``mooncake audit`` and (later) the web dashboard. Every method returns the
records of :mod:`.records` or small result dataclasses, never rows or ORM objects.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, TextIO

from sqlalchemy import (
    ColumnElement,
    Engine,
    Integer,
    Select,
    and_,
    case,
    cast,
    func,
    or_,
    select,
)

from mooncake_core.prediction_error import signed_error

from .db import make_engine, require_current_schema
from .explain import explain
from .models import CANDIDATE_COLUMNS, DECISION_COLUMNS, candidates, decisions
from .records import OUTCOMES, AuditEntry, CandidateRecord, DecisionRecord

ExportFormat = Literal["csv", "jsonl"]

UNKNOWN_OUTCOME = "unknown"
"""Filter value for decisions without an outcome (running, legacy, or update lost)."""

OUTCOME_FILTERS: tuple[str, ...] = (*OUTCOMES, UNKNOWN_OUTCOME)
"""Values :attr:`DecisionFilter.outcome` accepts."""


@dataclass(frozen=True, slots=True)
class DecisionFilter:
    """Which decisions to read.

    Attributes:
        since: Earliest decision time (unix seconds, inclusive).
        until: Latest decision time (unix seconds, exclusive).
        request_id: Only this request.
        instance: Only decisions that chose this instance (prefill or decode).
        policy: Only this policy.
        rejected_only: Only rejected decisions.
        limit: At most this many (``None``: all).
        offset: Skip this many first (newest first for lists).
        outcome: Only requests that ended this way (one of :data:`OUTCOME_FILTERS`;
            ``unknown`` selects decisions without a recorded outcome).
    """

    since: float | None = None
    until: float | None = None
    request_id: str | None = None
    instance: str | None = None
    policy: str | None = None
    rejected_only: bool = False
    limit: int | None = 50
    offset: int = 0
    outcome: str | None = None

    def __post_init__(self) -> None:
        if self.outcome is not None and self.outcome not in OUTCOME_FILTERS:
            raise ValueError(
                f"outcome must be one of {', '.join(OUTCOME_FILTERS)}; got {self.outcome!r}"
            )
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be >= 0, got {self.limit}")
        if self.offset < 0:
            raise ValueError(f"offset must be >= 0, got {self.offset}")


@dataclass(frozen=True, slots=True)
class ListedDecision:
    """One line of ``audit ls``.

    Attributes:
        id: Row id.
        decision: The decision.
        matched_prefix_blocks: Prefix blocks the chosen prefill instance held
            (``None`` when no prefill candidate was chosen or recorded).
    """

    id: int
    decision: DecisionRecord
    matched_prefix_blocks: int | None


@dataclass(frozen=True, slots=True)
class StatsBucket:
    """Aggregates over one time bucket (or over everything, for the total).

    Attributes:
        start: Bucket start (unix seconds); for the total, the first decision's time.
        decisions: Decisions in the bucket.
        rejected: Of which rejected.
        rejection_rate: ``rejected / decisions``.
        matched_blocks: Prefix blocks the chosen prefill instances held (admitted only).
        prompt_blocks: Prompt blocks of admitted decisions that chose a prefill instance.
        hit_rate: ``matched_blocks / prompt_blocks`` (``None`` without blocks).
        measured: Decisions with both a predicted and a measured TTFT.
        ttft_mae_s: Mean absolute TTFT prediction error, seconds.
        ttft_mre: Mean relative TTFT prediction error (``|actual - predicted| / actual``,
            over measured TTFTs above 0).
        ttft_bias_s: TTFT bias: mean of ``actual - predicted``, seconds (positive:
            requests took longer than predicted). See :mod:`mooncake_core.prediction_error`.
        outcome_completed: Requests that delivered every token.
        outcome_rejected: Requests refused with HTTP 429, by admission control or later
            (a full KV pool at Prepare).
        outcome_rejected_late: Of those, the ones admission control had admitted.
        outcome_failed: Requests a worker or the front door failed.
        outcome_cancelled: Requests stopped before the end (client gone).
        outcome_unknown: Decisions without an outcome (running, or written before
            outcomes were recorded).
    """

    start: float
    decisions: int
    rejected: int
    rejection_rate: float
    matched_blocks: int
    prompt_blocks: int
    hit_rate: float | None
    measured: int
    ttft_mae_s: float | None
    ttft_mre: float | None
    ttft_bias_s: float | None
    outcome_completed: int
    outcome_rejected: int
    outcome_rejected_late: int
    outcome_failed: int
    outcome_cancelled: int
    outcome_unknown: int


@dataclass(frozen=True, slots=True)
class AuditStats:
    """``audit stats``: per-bucket aggregates and the total.

    Attributes:
        bucket_s: Bucket width in seconds.
        buckets: One entry per non-empty bucket, oldest first.
        total: The same aggregates over all selected decisions.
        ttft_rel_p50: Median relative TTFT prediction error over all selected measured
            decisions (nearest rank; ``None`` without any).
        ttft_rel_p90: Its 90th percentile.
        model_measured: Of those, decisions that recorded the uncalibrated models'
            prediction (``model_ttft_s``, revision 0004).
        model_ttft_rel_p50: Median relative error of the uncalibrated prediction over
            them: what the error would have been without the online calibration.
        model_ttft_rel_p90: Its 90th percentile.
    """

    bucket_s: float
    buckets: tuple[StatsBucket, ...]
    total: StatsBucket
    ttft_rel_p50: float | None = None
    ttft_rel_p90: float | None = None
    model_measured: int = 0
    model_ttft_rel_p50: float | None = None
    model_ttft_rel_p90: float | None = None


def _decision(row: Any) -> DecisionRecord:
    m = row._mapping
    values = {c: m[c] for c in DECISION_COLUMNS}
    values["admitted"] = bool(values["admitted"])
    return DecisionRecord(**values)


def _candidate(row: Any) -> CandidateRecord:
    m = row._mapping
    values = {c: m[c] for c in CANDIDATE_COLUMNS}
    values["chosen"] = bool(values["chosen"])
    return CandidateRecord(**values)


class AuditReader:
    """Queries over an upgraded audit database.

    Args:
        engine: Engine of the audit database.
        own_engine: Dispose of it on :meth:`close`.

    Raises:
        SchemaError: the database is missing or not upgraded (run ``mooncake db upgrade``).
    """

    def __init__(self, engine: Engine, *, own_engine: bool = False) -> None:
        require_current_schema(engine)
        self._engine = engine
        self._own = own_engine

    @classmethod
    def open(cls, url: str) -> AuditReader:
        """Connect to ``url``; the reader owns (and closes) the engine.

        Raises:
            SchemaError: no such SQLite file, or not upgraded.
        """
        engine = make_engine(url)
        try:
            return cls(engine, own_engine=True)
        except BaseException:
            engine.dispose()
            raise

    def close(self) -> None:
        """Release the engine if this reader created it."""
        if self._own:
            self._engine.dispose()

    def __enter__(self) -> AuditReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- filters -------------------------------------------------------------------

    @staticmethod
    def _where(flt: DecisionFilter) -> list[ColumnElement[bool]]:
        d = decisions.c
        conds: list[ColumnElement[bool]] = []
        if flt.since is not None:
            conds.append(d.time >= flt.since)
        if flt.until is not None:
            conds.append(d.time < flt.until)
        if flt.request_id is not None:
            conds.append(d.request_id == flt.request_id)
        if flt.instance is not None:
            conds.append(or_(d.chosen_prefill == flt.instance, d.chosen_decode == flt.instance))
        if flt.policy is not None:
            conds.append(d.policy == flt.policy)
        if flt.rejected_only:
            conds.append(d.admitted.is_(False))
        if flt.outcome == UNKNOWN_OUTCOME:
            conds.append(d.outcome.is_(None))
        elif flt.outcome is not None:
            conds.append(d.outcome == flt.outcome)
        return conds

    @staticmethod
    def _chosen_prefill_join() -> Any:
        c = candidates.c
        return decisions.outerjoin(
            candidates,
            and_(c.decision_id == decisions.c.id, c.chosen.is_(True), c.role == "prefill"),
        )

    # -- queries -------------------------------------------------------------------

    def find(self, flt: DecisionFilter | None = None) -> list[ListedDecision]:
        """Decisions matching ``flt``, newest first."""
        flt = flt or DecisionFilter()
        q: Select[Any] = (
            select(decisions, candidates.c.matched_prefix_blocks.label("_matched"))
            .select_from(self._chosen_prefill_join())
            .where(*self._where(flt))
            .order_by(decisions.c.id.desc())
            .offset(flt.offset)
        )
        if flt.limit is not None:
            q = q.limit(flt.limit)
        with self._engine.connect() as conn:
            return [
                ListedDecision(id=r.id, decision=_decision(r), matched_prefix_blocks=r._matched)
                for r in conn.execute(q)
            ]

    def count(self, flt: DecisionFilter | None = None) -> int:
        """How many decisions match ``flt`` (ignoring limit and offset)."""
        flt = flt or DecisionFilter()
        q = select(func.count()).select_from(decisions).where(*self._where(flt))
        with self._engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def get(self, request_id: str) -> AuditEntry | None:
        """The latest decision for ``request_id`` with its candidates, or ``None``."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(decisions)
                .where(decisions.c.request_id == request_id)
                .order_by(decisions.c.id.desc())
                .limit(1)
            ).first()
            if row is None:
                return None
            cands = conn.execute(
                select(candidates)
                .where(candidates.c.decision_id == row.id)
                .order_by(candidates.c.id)
            )
            return AuditEntry(
                id=row.id, decision=_decision(row), candidates=tuple(_candidate(c) for c in cands)
            )

    def explain(self, request_id: str) -> str | None:
        """One paragraph on the latest decision for ``request_id`` (``None``: unknown)."""
        entry = self.get(request_id)
        return None if entry is None else explain(entry)

    def stats(self, bucket_s: float, flt: DecisionFilter | None = None) -> AuditStats:
        """Prediction error, prefix hit rate, rejection rate and outcomes per time bucket.

        Args:
            bucket_s: Bucket width in seconds.
            flt: Which decisions (limit and offset are ignored).

        Raises:
            ValueError: ``bucket_s`` <= 0.
        """
        if not bucket_s > 0:
            raise ValueError(f"bucket_s must be > 0, got {bucket_s!r}")
        flt = flt or DecisionFilter()
        d = decisions.c
        if self._engine.dialect.name == "sqlite":
            # times are positive, so truncation is floor; SQLite may lack floor().
            bucket: ColumnElement[Any] = cast(d.time / bucket_s, Integer)
        else:
            bucket = func.floor(d.time / bucket_s)
        measured = and_(d.actual_ttft_s.is_not(None), d.predicted_ttft_s.is_not(None))
        # The definitions of mooncake_core.prediction_error, aggregated in SQL: the signed
        # error is that module's own expression; relative_error is |err| / actual, actual > 0.
        err = signed_error(d.predicted_ttft_s, d.actual_ttft_s)
        matched = candidates.c.matched_prefix_blocks
        # Hit rate counts admitted requests only: rejected ones never used the cache.
        hit = and_(matched.is_not(None), d.admitted.is_(True))
        cols = [
            func.min(d.time),
            func.count(),
            func.sum(case((d.admitted.is_(False), 1), else_=0)),
            func.sum(case((hit, matched), else_=0)),
            func.sum(case((hit, d.prompt_blocks), else_=0)),
            func.sum(case((measured, 1), else_=0)),
            func.avg(case((measured, func.abs(err)), else_=None)),
            func.avg(
                case(
                    (and_(measured, d.actual_ttft_s > 0), func.abs(err) / d.actual_ttft_s),
                    else_=None,
                )
            ),
            func.avg(case((measured, err), else_=None)),
            *(func.sum(case((d.outcome == o, 1), else_=0)) for o in OUTCOMES),
            func.sum(case((and_(d.outcome == "rejected", d.admitted.is_(True)), 1), else_=0)),
            func.sum(case((d.outcome.is_(None), 1), else_=0)),
        ]
        base = select(*cols).select_from(self._chosen_prefill_join()).where(*self._where(flt))
        per_bucket = base.add_columns(bucket.label("b")).group_by(bucket).order_by(bucket)
        with self._engine.connect() as conn:
            rows = conn.execute(per_bucket).all()
            total_row = conn.execute(base).one()
        buckets = tuple(_bucket(r, start=float(r.b) * bucket_s) for r in rows)
        total = _bucket(total_row, start=float(total_row[0] or 0.0))
        where = self._where(flt)
        p50, p90, _ = self._rel_quantiles(d.predicted_ttft_s, where)
        m50, m90, m_n = self._rel_quantiles(d.model_ttft_s, where)
        return AuditStats(
            bucket_s=bucket_s,
            buckets=buckets,
            total=total,
            ttft_rel_p50=p50,
            ttft_rel_p90=p90,
            model_measured=m_n,
            model_ttft_rel_p50=m50,
            model_ttft_rel_p90=m90,
        )

    def _rel_quantiles(
        self, predicted: ColumnElement[Any], where: list[ColumnElement[bool]]
    ) -> tuple[float | None, float | None, int]:
        """Median and p90 (nearest rank) of ``|actual - predicted| / actual`` in SQL."""
        d = decisions.c
        conds = [*where, predicted.is_not(None), d.actual_ttft_s > 0]
        rel = func.abs(signed_error(predicted, d.actual_ttft_s)) / d.actual_ttft_s
        with self._engine.connect() as conn:
            n = int(conn.execute(select(func.count()).where(*conds)).scalar_one())
            if n == 0:
                return None, None, 0
            out = []
            for q in (0.5, 0.9):
                k = max(math.ceil(q * n) - 1, 0)
                stmt = select(rel).where(*conds).order_by(rel).limit(1).offset(k)
                out.append(float(conn.execute(stmt).scalar_one()))
        return out[0], out[1], n

    def export(self, out: TextIO, fmt: ExportFormat, flt: DecisionFilter | None = None) -> int:
        """Stream decisions oldest first to ``out`` as CSV (decisions only) or JSON lines
        (each decision with a ``candidates`` list).

        Args:
            out: Text stream to write to.
            fmt: ``csv`` or ``jsonl``.
            flt: Which decisions (``limit=None`` for all).

        Returns:
            Decisions written.

        Raises:
            ValueError: unknown format.
        """
        if fmt not in ("csv", "jsonl"):
            raise ValueError(f"export format must be csv or jsonl, got {fmt!r}")
        writer = None
        if fmt == "csv":
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(("id", *DECISION_COLUMNS))
        n = 0
        for part in self._iter_partitions(flt or DecisionFilter(limit=None)):
            if writer is not None:
                writer.writerows(part)
                n += len(part)
                continue
            by_id: dict[int, list[dict[str, Any]]] = {r[0]: [] for r in part}
            with self._engine.connect() as conn:
                for c in conn.execute(
                    select(candidates)
                    .where(candidates.c.decision_id.in_(list(by_id)))
                    .order_by(candidates.c.id)
                ):
                    by_id[c.decision_id].append(asdict(_candidate(c)))
            for r in part:
                rec = {"id": r[0], **asdict(_decision(r))}
                rec["candidates"] = by_id[r[0]]
                out.write(json.dumps(rec, separators=(",", ":")) + "\n")
                n += 1
        return n

    def _iter_partitions(self, flt: DecisionFilter, size: int = 1000) -> Iterator[list[Any]]:
        q: Select[Any] = (
            select(decisions.c.id, *(decisions.c[c] for c in DECISION_COLUMNS))
            .where(*self._where(flt))
            .order_by(decisions.c.id)
            .offset(flt.offset)
        )
        if flt.limit is not None:
            q = q.limit(flt.limit)
        with self._engine.connect() as conn:
            result = conn.execution_options(yield_per=size).execute(q)
            for part in result.partitions(size):
                yield list(part)


def _bucket(r: Any, *, start: float) -> StatsBucket:
    n = int(r[1] or 0)
    rejected = int(r[2] or 0)
    matched = int(r[3] or 0)
    blocks = int(r[4] or 0)
    # Columns 9.. are one count per outcome, in OUTCOMES order (see ``stats``).
    per_outcome = {o: int(r[9 + i] or 0) for i, o in enumerate(OUTCOMES)}
    return StatsBucket(
        start=start,
        decisions=n,
        rejected=rejected,
        rejection_rate=rejected / n if n else 0.0,
        matched_blocks=matched,
        prompt_blocks=blocks,
        hit_rate=matched / blocks if blocks else None,
        measured=int(r[5] or 0),
        ttft_mae_s=None if r[6] is None else float(r[6]),
        ttft_mre=None if r[7] is None else float(r[7]),
        ttft_bias_s=None if r[8] is None else float(r[8]),
        outcome_completed=per_outcome["completed"],
        outcome_rejected=per_outcome["rejected"],
        outcome_failed=per_outcome["failed"],
        outcome_cancelled=per_outcome["cancelled"],
        outcome_rejected_late=int(r[9 + len(OUTCOMES)] or 0),
        outcome_unknown=int(r[10 + len(OUTCOMES)] or 0),
    )
