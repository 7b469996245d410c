"""Prediction inputs: the calibrated overhead, the uncalibrated model's TTFT, decode KV.

The Conductor calibrates its predictions online (docs/conductor.md, "Online
calibration"); a decision now records, beside the prediction it used, what the
uncalibrated models (profile fit, network model) would have predicted, and the part of
the TTFT predicted outside the prefill instance. Decode candidates record the KV the
Conductor counted on the instance, its capacity and the use its worker reported, so
``audit explain`` shows what the decode choice was based on. Existing rows get NULLs:
nothing recorded those inputs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN is native on SQLite, so batch mode alters in place (no table copy).
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("model_ttft_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("predicted_overhead_s", sa.Float(), nullable=True))
    with op.batch_alter_table("candidates") as batch:
        batch.add_column(sa.Column("overhead_time_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("kv_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("kv_capacity_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("kv_reported_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidates") as batch:
        batch.drop_column("kv_reported_tokens")
        batch.drop_column("kv_capacity_tokens")
        batch.drop_column("kv_tokens")
        batch.drop_column("overhead_time_s")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("predicted_overhead_s")
        batch.drop_column("model_ttft_s")
