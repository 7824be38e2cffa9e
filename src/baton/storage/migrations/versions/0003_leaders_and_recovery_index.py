"""leaders and recovery index

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 14:59:24.508384
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leaders",
        sa.Column("role", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=256), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("role"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tasks_recovered",
            ["attempts"],
            unique=False,
            postgresql_where=sa.text("attempts > 0"),
            sqlite_where=sa.text("attempts > 0"),
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_tasks_recovered", postgresql_where=sa.text("attempts > 0"), sqlite_where=sa.text("attempts > 0")
        )

    op.drop_table("leaders")
