"""leases: leadership that expires, scheduler ownership with fencing terms, workers

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 09:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("leaders") as leaders:
        leaders.add_column(sa.Column("term", sa.BigInteger(), nullable=False, server_default="0"))
        leaders.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        leaders.add_column(sa.Column("holds_lock", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("schedulers") as schedulers:
        schedulers.add_column(sa.Column("owner", sa.String(length=256), nullable=True))
        schedulers.add_column(sa.Column("term", sa.BigInteger(), nullable=False, server_default="0"))
        schedulers.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        schedulers.create_index("ix_schedulers_owner", ["owner"])
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=256), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("workers")
    with op.batch_alter_table("schedulers") as schedulers:
        schedulers.drop_index("ix_schedulers_owner")
        schedulers.drop_column("lease_expires_at")
        schedulers.drop_column("term")
        schedulers.drop_column("owner")
    with op.batch_alter_table("leaders") as leaders:
        leaders.drop_column("holds_lock")
        leaders.drop_column("expires_at")
        leaders.drop_column("term")
