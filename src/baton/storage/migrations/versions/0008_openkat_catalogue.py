"""KATalogus as the catalogue: where an organisation came from and when its catalogue was last read,
a plugin's cron, interval and run_on, the new boefjes' backfill cursors, outside services' state

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("organisations") as organisations:
        # "katalogus": created by the KATalogus sync, the only ones it may remove; NULL: made in Baton.
        organisations.add_column(sa.Column("source", sa.String(length=16), nullable=True))
        organisations.add_column(sa.Column("catalogue_synced_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("plugins") as plugins:
        plugins.add_column(sa.Column("cron", sa.String(length=128), nullable=True))
        plugins.add_column(sa.Column("interval", sa.Integer(), nullable=True))
        plugins.add_column(sa.Column("run_on", sa.JSON(), nullable=True))
    op.create_table(
        "boefje_backfills",
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("boefje_id", sa.String(length=128), nullable=False),
        sa.Column("object_types", sa.JSON(), nullable=False),
        sa.Column("scan_level", sa.Integer(), nullable=False),
        sa.Column("valid_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_offset", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["organisation"], ["organisations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("organisation", "boefje_id"),
    )
    op.create_table(
        "outside_services",
        sa.Column("service", sa.String(length=32), nullable=False),
        sa.Column("down_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("service"),
    )


def downgrade() -> None:
    op.drop_table("outside_services")
    op.drop_table("boefje_backfills")
    with op.batch_alter_table("plugins") as plugins:
        plugins.drop_column("run_on")
        plugins.drop_column("interval")
        plugins.drop_column("cron")
    with op.batch_alter_table("organisations") as organisations:
        organisations.drop_column("catalogue_synced_at")
        organisations.drop_column("source")
