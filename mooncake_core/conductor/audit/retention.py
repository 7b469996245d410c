"""Retention: delete audit decisions past an age or beyond a row budget.

Kept as a plain function over a connection, with ``now`` passed in, so tests pin the
exact rows that go and the writer runs it periodically on its own thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, select

from .models import candidates, decisions


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one retention pass deleted.

    Attributes:
        by_age: Decisions deleted because they were older than the age limit.
        by_rows: Decisions deleted because the table held more than the row budget.
    """

    by_age: int
    by_rows: int

    @property
    def total(self) -> int:
        """Decisions deleted in all (their candidates went with them)."""
        return self.by_age + self.by_rows


def apply_retention(
    conn: Connection, *, now: float, max_age_s: float, max_rows: int
) -> RetentionResult:
    """Delete decisions older than ``now - max_age_s``, then all but the newest ``max_rows``.

    "Newest" is by row id, i.e. the order the writer stored them. Candidates of deleted
    decisions are deleted explicitly (not left to ``ON DELETE CASCADE``, which SQLite
    honours only with its foreign-key pragma on). Runs inside the caller's transaction.

    Args:
        conn: Connection in a transaction.
        now: Current time (unix seconds).
        max_age_s: Keep decisions whose ``time`` is at least ``now - max_age_s``.
        max_rows: Keep at most this many decisions.

    Returns:
        How many decisions each rule deleted.

    Raises:
        ValueError: ``max_age_s`` <= 0 or ``max_rows`` < 1.
    """
    if max_age_s <= 0:
        raise ValueError(f"max_age_s must be > 0, got {max_age_s!r}")
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows!r}")
    cutoff = now - max_age_s
    old = select(decisions.c.id).where(decisions.c.time < cutoff)
    conn.execute(delete(candidates).where(candidates.c.decision_id.in_(old)))
    by_age = conn.execute(delete(decisions).where(decisions.c.time < cutoff)).rowcount or 0

    by_rows = 0
    # id of the oldest decision that stays; everything below it goes.
    keep_from = conn.execute(
        select(decisions.c.id).order_by(decisions.c.id.desc()).limit(1).offset(max_rows - 1)
    ).scalar_one_or_none()
    if keep_from is not None:
        below = conn.execute(
            select(func.count()).select_from(decisions).where(decisions.c.id < keep_from)
        ).scalar_one()
        if below:
            conn.execute(delete(candidates).where(candidates.c.decision_id < keep_from))
            by_rows = conn.execute(delete(decisions).where(decisions.c.id < keep_from)).rowcount
    return RetentionResult(by_age=by_age, by_rows=by_rows or 0)
