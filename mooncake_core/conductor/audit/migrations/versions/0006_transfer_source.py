"""Transfer source: where each candidate's fetch would have come from.

A candidate row recorded how many blocks it would fetch and the predicted time, not
from where; the time depends on both ends (the network model prices a path at its
slower end), so a row without its source could not be checked against the bandwidth
that priced it. Existing rows get NULL: nothing recorded it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN is native on SQLite, so batch mode alters in place (no table copy).
    with op.batch_alter_table("candidates") as batch:
        batch.add_column(sa.Column("transfer_source", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidates") as batch:
        batch.drop_column("transfer_source")
