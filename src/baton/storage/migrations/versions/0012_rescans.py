"""Periodic rescans: why a schedule was disabled (a vanished object, a plugin no longer enabled)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 08:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Set when the rescans disable a schedule, cleared when they (or a new task for its object) enable it
    # again; a schedule disabled by hand (PATCH /schedules) has no reason and stays disabled.
    op.add_column("schedules", sa.Column("disabled_reason", sa.String(64), nullable=True))
    op.add_column("schedules", sa.Column("disabled_detail", sa.String(512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("disabled_detail")
        batch.drop_column("disabled_reason")
