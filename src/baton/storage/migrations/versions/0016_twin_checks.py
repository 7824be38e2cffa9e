"""Twin checks: boefje tasks made and not yet looked at for twins, kept through a restart

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Written in the transaction that makes the task, removed by the twin step that looks at it; deleted
    # with its task (retention, an organisation removed).
    op.create_table(
        "twin_checks",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("boefje_id", sa.String(length=128), nullable=False),
        sa.Column("scan_level", sa.Integer(), nullable=False),
        sa.Column("input_ooi", sa.String(length=512), nullable=False),
        sa.Column("noted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("task_id"),
    )
    op.create_index("ix_twin_checks_organisation", "twin_checks", ["organisation", "noted_at"])


def downgrade() -> None:
    op.drop_index("ix_twin_checks_organisation", table_name="twin_checks")
    op.drop_table("twin_checks")
