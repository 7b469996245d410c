"""Migration bandwidth: what the network model priced a hotspot migration at.

The live Conductor now learns each location's bandwidth from the fetches the prefill
workers time (``NetworkModel.observe_transfer``); a decision with a migration records
the bandwidth of the path's slower end and where it came from (``measured``,
``configured`` or ``default``), so ``audit explain`` shows what the transfer price was
based on. Existing rows get NULLs: nothing recorded it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN is native on SQLite, so batch mode alters in place (no table copy).
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("migration_bandwidth_bps", sa.Float(), nullable=True))
        batch.add_column(sa.Column("migration_bandwidth_source", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("migration_bandwidth_source")
        batch.drop_column("migration_bandwidth_bps")
