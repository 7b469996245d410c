"""How the writer puts a batch into the database: rows built in bulk, few statements.

Split from :mod:`.writer` (queueing and the thread) because this is where the speed and
the GIL behaviour are decided; see ``bench/audit_throughput.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

from sqlalchemy import Connection, func, select, text

from .models import CANDIDATE_COLUMNS, DECISION_COLUMNS, candidates, decisions
from .records import CandidateRecord, DecisionRecord

Pair = tuple[DecisionRecord, Sequence[CandidateRecord]]

GIL_SLICE_S = 0.0002
"""Longest stretch of Python work the writer does before it releases the GIL."""


class GilPacer:
    """Releases the GIL after about :data:`GIL_SLICE_S` of work, so the conductor never waits.

    Without it, a decision that arrives while the writer builds rows can wait for
    CPython's switch interval (5 ms) before it forces the GIL away; in
    ``bench/audit_throughput.py`` (paced conductor) p99 decision latency with the writer
    on was 8-12 ms without releases and 0.4-4 ms with them (no audit: ~0.25 ms).
    Releasing on a time budget rather than every N rows matters because
    ``time.sleep(0)`` is a system call: cheap on an idle machine, but on a loaded one
    each call can cost the writer its CPU slice (0.5 ms measured), so calling it after
    every 16 rows halved the write rate.
    """

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    def tick(self) -> None:
        """Call between units of work; releases the GIL when the budget is spent."""
        now = time.perf_counter()
        if now - self._since >= GIL_SLICE_S:
            time.sleep(0)
            self._since = time.perf_counter()

    def released(self) -> None:
        """Note that a call which releases the GIL (a SQLite statement) just returned."""
        self._since = time.perf_counter()


_decision_values = attrgetter(*DECISION_COLUMNS)
_candidate_values = attrgetter(*CANDIDATE_COLUMNS)


@dataclass(frozen=True, slots=True)
class Update:
    """Measured latency for the latest decision of a request (``None``: unchanged)."""

    request_id: str
    ttft_s: float | None
    tbt_s: float | None


@dataclass(frozen=True, slots=True)
class OutcomeUpdate:
    """How a request ended, for its latest decision (replaces an earlier outcome)."""

    request_id: str
    outcome: str
    detail: str | None


def insert_batch(
    conn: Connection, rows: list[Pair], next_id: int | None, pacer: GilPacer | None = None
) -> int | None:
    """Insert decisions and their candidates, numbering decisions from ``next_id``.

    Args:
        conn: Connection in the batch's transaction.
        rows: Decisions with their candidates.
        next_id: Id for the first decision; ``None`` reads ``max(id) + 1``.
        pacer: Releases the GIL while rows are built (a fresh one when omitted).

    Returns:
        The id for the next decision (unchanged input when ``rows`` is empty).
    """
    if not rows:
        return next_id
    if next_id is None:
        top = conn.execute(select(func.max(decisions.c.id))).scalar_one_or_none()
        next_id = (top or 0) + 1
    pacer = pacer or GilPacer()
    d_rows: list[tuple[Any, ...]] = []
    c_rows: list[tuple[Any, ...]] = []
    for rec, cands in rows:
        d_rows.append((next_id, *_decision_values(rec)))
        for c in cands:
            c_rows.append((next_id, *_candidate_values(c)))
        next_id += 1
        pacer.tick()
    _executemany(conn, "decisions", ("id", *DECISION_COLUMNS), d_rows, pacer)
    if c_rows:
        _executemany(conn, "candidates", ("decision_id", *CANDIDATE_COLUMNS), c_rows, pacer)
    return next_id


_NO_BOUND = 2**62
"""Id bound for an update that may touch any decision (every id is below it)."""

# One statement per kind of update, run as executemany: compiling a Core UPDATE per item
# cost ~150 us each, which capped the writer at ~6k decisions/s when each decision was
# followed by an update. Both statements select the newest decision of the request at or
# below the bound, like the original per-item form.
_SET_ACTUAL = text(
    "UPDATE decisions SET actual_ttft_s = COALESCE(:ttft, actual_ttft_s), "
    "actual_tbt_s = COALESCE(:tbt, actual_tbt_s) WHERE id = (SELECT max(id) FROM decisions "
    "WHERE request_id = :rid AND id <= :bound)"
)
_SET_OUTCOME = text(
    "UPDATE decisions SET outcome = :outcome, outcome_detail = :detail WHERE id = "
    "(SELECT max(id) FROM decisions WHERE request_id = :rid AND id <= :bound)"
)


def apply_updates(
    conn: Connection, updates: Sequence[tuple[Update | OutcomeUpdate, int | None]]
) -> None:
    """Set measured TTFT/TBT or the outcome on the latest decision of each request.

    Args:
        conn: Connection in the batch's transaction.
        updates: Each update with the highest decision id it may touch (the last
            decision queued before it), or ``None`` for no bound. The bound keeps queue
            order when a batch inserts a newer decision for the same request id after
            the update was queued: the update stays with the decision it followed.

    Updates of one kind are applied in the order given (a later outcome replaces an
    earlier one; the two kinds set different columns, so their relative order does not
    matter); an update for a request without a decision changes nothing.
    """
    actual: list[dict[str, Any]] = []
    outcome: list[dict[str, Any]] = []
    for u, max_id in updates:
        bound = _NO_BOUND if max_id is None else max_id
        if isinstance(u, OutcomeUpdate):
            outcome.append(
                {"outcome": u.outcome, "detail": u.detail, "rid": u.request_id, "bound": bound}
            )
        elif u.ttft_s is not None or u.tbt_s is not None:
            actual.append({"ttft": u.ttft_s, "tbt": u.tbt_s, "rid": u.request_id, "bound": bound})
    if actual:
        conn.execute(_SET_ACTUAL, actual)
    if outcome:
        conn.execute(_SET_OUTCOME, outcome)


_ROWS_PER_STATEMENT = 256
"""Rows per multi-row INSERT on SQLite (21 columns x 256 stays far below its 32766
bound-parameter limit)."""


def decision_stored(conn: Connection, request_id: str, time: float) -> bool:
    """Whether a decision for ``request_id`` made at ``time`` is stored."""
    q = (
        select(decisions.c.id)
        .where(decisions.c.request_id == request_id, decisions.c.time == time)
        .limit(1)
    )
    return conn.execute(q).first() is not None


def _multirow_values(conn: Connection) -> bool:
    """Whether to use the multi-row VALUES fast path (SQLite) or SQLAlchemy Core."""
    return conn.dialect.name == "sqlite"


def _executemany(
    conn: Connection,
    table: str,
    columns: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    pacer: GilPacer,
) -> None:
    """Insert tuples without per-row ORM or dict overhead.

    On SQLite, rows go out as multi-row ``INSERT ... VALUES (...), (...)`` statements of
    up to 256 rows. The sqlite3 module releases the GIL around every statement step; one
    step per row (plain ``executemany``) means one GIL hand-off per row, which lets this
    thread interrupt the decision thread hundreds of thousands of times a second.
    """
    if not _multirow_values(conn):
        tbl = decisions if table == "decisions" else candidates
        conn.execute(tbl.insert(), [dict(zip(columns, r, strict=True)) for r in rows])
        return
    head = f"INSERT INTO {table} ({','.join(columns)}) VALUES "
    one = "(" + ",".join("?" * len(columns)) + ")"
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        full = None
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            part = rows[start : start + _ROWS_PER_STATEMENT]
            if len(part) == _ROWS_PER_STATEMENT:
                full = full or head + ",".join([one] * _ROWS_PER_STATEMENT)
                sql = full
            else:
                sql = head + ",".join([one] * len(part))
            cursor.execute(sql, list(chain.from_iterable(part)))
            pacer.released()  # sqlite3 released the GIL while the statement ran
    finally:
        cursor.close()
