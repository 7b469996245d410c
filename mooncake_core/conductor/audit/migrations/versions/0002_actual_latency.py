"""Measured latency: actual TTFT and TBT, filled in after a request ran.

Revision 0001 recorded only predictions; these columns let ``mooncake audit stats``
report prediction error. Existing rows keep their data and get NULL actuals.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN is native on SQLite, so batch mode alters in place (no table copy).
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("actual_ttft_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("actual_tbt_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("actual_tbt_s")
        batch.drop_column("actual_ttft_s")
