"""SQLAlchemy table models of the audit database (schema owned by ``migrations/``).

These are storage models, separate from the records in :mod:`.records` that the rest of
the code passes around. Nothing here touches a database at import time: tables are
created only by the Alembic migrations (``mooncake db upgrade``), and a test checks that
autogenerate finds no difference between these models and the migrations.

Row ids are assigned by the single writer (see :class:`.writer.AuditWriter`), so a whole
batch of decisions and their candidates goes out as two ``executemany`` calls.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_REVISION = "0006"
"""Alembic revision these models correspond to (a test keeps it equal to the head)."""

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names are deterministic so migrations can refer to them on every backend."""


class Base(DeclarativeBase):
    """Declarative base holding the one metadata object Alembic targets."""

    metadata = MetaData(naming_convention=NAMING)


class DecisionRow(Base):
    """One scheduling decision (see :class:`.records.DecisionRecord` for the meaning)."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    time: Mapped[float] = mapped_column(Float, nullable=False, index=True)
    request_id: Mapped[str] = mapped_column(String(256), nullable=False, index=True)
    prompt_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    prompt_blocks: Mapped[int] = mapped_column(Integer, nullable=False)
    first_block_key: Mapped[str | None] = mapped_column(String(32), nullable=True)
    block_key_count: Mapped[int] = mapped_column(Integer, nullable=False)
    policy: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    chosen_prefill: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    chosen_decode: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    predicted_ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_tbt_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    admitted: Mapped[bool] = mapped_column(Boolean, nullable=False, index=True)
    reject_reason: Mapped[str | None] = mapped_column(String(512), nullable=True)
    retry_after_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    migration_source: Mapped[str | None] = mapped_column(String(64), nullable=True)
    migration_blocks: Mapped[int] = mapped_column(Integer, nullable=False)
    # Added by revision 0002: filled in after the request ran.
    actual_ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    actual_tbt_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Added by revision 0003: how the request ended (NULL: unknown, or a legacy row).
    # Indexed because `audit ls --outcome failed` looks for rare values in a large table.
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True, index=True)
    outcome_detail: Mapped[str | None] = mapped_column(String(512), nullable=True)
    # Added by revision 0004: what the uncalibrated models predicted, and the calibrated
    # time outside the prefill instance.
    model_ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_overhead_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Added by revision 0005: the bandwidth the migration was priced at, and its source.
    migration_bandwidth_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    migration_bandwidth_source: Mapped[str | None] = mapped_column(String(16), nullable=True)


class CandidateRow(Base):
    """One instance considered for a decision (see :class:`.records.CandidateRecord`).

    Only ``decision_id`` is indexed: candidates are always read through their decision,
    and filtering by instance uses the decision's ``chosen_*`` columns. An extra index on
    ``instance`` measured ~15% off the sustained insert rate.
    """

    __tablename__ = "candidates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    decision_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("decisions.id", ondelete="CASCADE"), nullable=False, index=True
    )
    instance: Mapped[str] = mapped_column(String(64), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    matched_prefix_blocks: Mapped[int] = mapped_column(Integer, nullable=False)
    queue_time_s: Mapped[float] = mapped_column(Float, nullable=False)
    transfer_time_s: Mapped[float] = mapped_column(Float, nullable=False)
    prefill_time_s: Mapped[float] = mapped_column(Float, nullable=False)
    predicted_ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_tbt_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    chosen: Mapped[bool] = mapped_column(Boolean, nullable=False)
    why_not: Mapped[str | None] = mapped_column(String(512), nullable=True)
    transfer_blocks: Mapped[int] = mapped_column(Integer, nullable=False)
    # Added by revision 0004: prefill rows' predicted overhead; decode rows' KV inputs.
    overhead_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    kv_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kv_capacity_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kv_reported_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Added by revision 0006: the location a candidate's fetch would come from.
    transfer_source: Mapped[str | None] = mapped_column(String(64), nullable=True)


metadata = Base.metadata
"""The one metadata object (Alembic's ``target_metadata``)."""
decisions: Table = cast(Table, DecisionRow.__table__)
"""The ``decisions`` table (Core), used by the writer and the queries."""
candidates: Table = cast(Table, CandidateRow.__table__)
"""The ``candidates`` table (Core)."""

DECISION_COLUMNS: tuple[str, ...] = (
    "time",
    "request_id",
    "prompt_tokens",
    "prompt_blocks",
    "first_block_key",
    "block_key_count",
    "policy",
    "chosen_prefill",
    "chosen_decode",
    "predicted_ttft_s",
    "predicted_tbt_s",
    "admitted",
    "reject_reason",
    "retry_after_s",
    "migration_source",
    "migration_blocks",
    "actual_ttft_s",
    "actual_tbt_s",
    "outcome",
    "outcome_detail",
    "model_ttft_s",
    "predicted_overhead_s",
    "migration_bandwidth_bps",
    "migration_bandwidth_source",
)
"""Decision columns in :class:`.records.DecisionRecord` field order (``id`` excluded)."""

CANDIDATE_COLUMNS: tuple[str, ...] = (
    "instance",
    "role",
    "matched_prefix_blocks",
    "queue_time_s",
    "transfer_time_s",
    "prefill_time_s",
    "predicted_ttft_s",
    "predicted_tbt_s",
    "chosen",
    "why_not",
    "transfer_blocks",
    "overhead_time_s",
    "kv_tokens",
    "kv_capacity_tokens",
    "kv_reported_tokens",
    "transfer_source",
)
"""Candidate columns in :class:`.records.CandidateRecord` field order (keys excluded)."""
