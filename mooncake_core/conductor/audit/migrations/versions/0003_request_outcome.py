"""Request outcome: how each scheduled request ended (completed, rejected, failed, cancelled).

Revision 0002 could tell what the scheduler decided and how long the request took, but an
admitted request that later hit a full KV pool, failed on a worker or was cancelled by its
client still read "admitted". ``outcome`` is a short stable code, ``outcome_detail`` the
reason code or error text. Existing rows keep their data and get NULL (unknown) outcomes:
nothing recorded how they ended.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN is native on SQLite, so batch mode alters in place (no table copy).
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("outcome", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("outcome_detail", sa.String(length=512), nullable=True))
        batch.create_index(batch.f("ix_decisions_outcome"), ["outcome"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_index(batch.f("ix_decisions_outcome"))
        batch.drop_column("outcome_detail")
        batch.drop_column("outcome")
