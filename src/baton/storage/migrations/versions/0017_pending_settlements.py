"""Pending settlements: pop receipts to settle once more, kept in the database rather than in memory

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pending_settlements",
        sa.Column("receipt", sa.Uuid(), nullable=False),
        sa.Column("popped_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("receipt"),
    )
    op.create_index("ix_pending_settlements_due_at", "pending_settlements", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_pending_settlements_due_at", table_name="pending_settlements")
    op.drop_table("pending_settlements")
