"""Retired organisations: one KATalogus no longer lists keeps its tasks and schedules, unscheduled

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both backends, nullable without a default: no table rewrite.
    op.add_column("organisations", sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))
    # The few retired organisations, read by every worker's count of schedulers and each housekeeping round.
    op.create_index(
        "ix_organisations_retired",
        "organisations",
        ["id"],
        postgresql_where=sa.text("retired_at IS NOT NULL"),
        sqlite_where=sa.text("retired_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_organisations_retired", table_name="organisations")
    with op.batch_alter_table("organisations", recreate="never") as organisations:
        organisations.drop_column("retired_at")
