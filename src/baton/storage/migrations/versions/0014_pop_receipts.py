"""Pop receipts: each pop stamps its tasks with a receipt; idempotency keys of pops

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 08:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both backends (no batch copy of `tasks`: its triggers stay); nullable with
    # no default, so PostgreSQL does not rewrite the table.
    # No index: a receipt's tasks are found by (status, modified_at), which a pop writes anyway.
    op.add_column("tasks", sa.Column("receipt", sa.Uuid(), nullable=True))
    op.create_table(
        "pop_receipts",
        sa.Column("scope", sa.String(length=160), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("receipt", sa.Uuid(), nullable=False),
        sa.Column("popped_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_index("ix_pop_receipts_receipt", "pop_receipts", ["receipt"])
    op.create_index("ix_pop_receipts_expires_at", "pop_receipts", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_pop_receipts_expires_at", table_name="pop_receipts")
    op.drop_index("ix_pop_receipts_receipt", table_name="pop_receipts")
    op.drop_table("pop_receipts")
    with op.batch_alter_table("tasks", recreate="never") as tasks:
        tasks.drop_column("receipt")
