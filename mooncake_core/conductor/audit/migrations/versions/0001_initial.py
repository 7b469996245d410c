"""Initial audit schema: decisions and the candidates each one considered.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("request_id", sa.String(length=256), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_blocks", sa.Integer(), nullable=False),
        sa.Column("first_block_key", sa.String(length=32), nullable=True),
        sa.Column("block_key_count", sa.Integer(), nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("chosen_prefill", sa.String(length=64), nullable=True),
        sa.Column("chosen_decode", sa.String(length=64), nullable=True),
        sa.Column("predicted_ttft_s", sa.Float(), nullable=True),
        sa.Column("predicted_tbt_s", sa.Float(), nullable=True),
        sa.Column("admitted", sa.Boolean(), nullable=False),
        sa.Column("reject_reason", sa.String(length=512), nullable=True),
        sa.Column("retry_after_s", sa.Float(), nullable=True),
        sa.Column("migration_source", sa.String(length=64), nullable=True),
        sa.Column("migration_blocks", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    with op.batch_alter_table("decisions") as batch:
        for col in ("time", "request_id", "policy", "chosen_prefill", "chosen_decode", "admitted"):
            batch.create_index(batch.f(f"ix_decisions_{col}"), [col], unique=False)

    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("decision_id", sa.Integer(), nullable=False),
        sa.Column("instance", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("matched_prefix_blocks", sa.Integer(), nullable=False),
        sa.Column("queue_time_s", sa.Float(), nullable=False),
        sa.Column("transfer_time_s", sa.Float(), nullable=False),
        sa.Column("prefill_time_s", sa.Float(), nullable=False),
        sa.Column("predicted_ttft_s", sa.Float(), nullable=True),
        sa.Column("predicted_tbt_s", sa.Float(), nullable=True),
        sa.Column("chosen", sa.Boolean(), nullable=False),
        sa.Column("why_not", sa.String(length=512), nullable=True),
        sa.Column("transfer_blocks", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["decision_id"],
            ["decisions.id"],
            name=op.f("fk_candidates_decision_id_decisions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
    )
    with op.batch_alter_table("candidates") as batch:
        batch.create_index(batch.f("ix_candidates_decision_id"), ["decision_id"], unique=False)


def downgrade() -> None:
    op.drop_table("candidates")
    op.drop_table("decisions")
