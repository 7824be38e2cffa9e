"""schedules (OpenKAT's, report schedules among them); task indexes for listings and stats

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 08:30:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import mmh3
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    schedules = op.create_table(
        "schedules",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scheduler_id", sa.String(length=16), nullable=False),
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=True),
        sa.Column("data", json_type, nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("schedule", sa.String(length=128), nullable=True),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["organisation"], ["organisations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hash"),
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.create_index("ix_schedules_due", ["scheduler_id", "organisation", "deadline_at"], unique=False)
        batch_op.create_index("ix_schedules_created", ["created_at"], unique=False)
    # Report schedules become schedules of the report scheduler; their recipe is their own id when
    # they named none.
    connection = op.get_bind()
    old = sa.table(
        "report_schedules",
        sa.column("id", sa.Uuid()),
        sa.column("organisation", sa.String()),
        sa.column("cron", sa.String()),
        sa.column("data", sa.JSON()),
        sa.column("enabled", sa.Boolean()),
        sa.column("next_run_at", sa.DateTime(timezone=True)),
        sa.column("last_run_at", sa.DateTime(timezone=True)),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    rows = []
    for row in connection.execute(sa.select(old)).mappings():
        data = dict(row["data"] or {})
        recipe = str(data.get("report_recipe_id") or row["id"])
        data.setdefault("report_recipe_id", recipe)
        data.setdefault("organisation_id", row["organisation"])
        rows.append(
            {
                "id": row["id"],
                "scheduler_id": "report",
                "organisation": row["organisation"],
                "hash": bytes(mmh3.hash_bytes(f"{recipe}-{row['organisation']}")).hex(),
                "data": data,
                "enabled": row["enabled"],
                "schedule": row["cron"],
                "deadline_at": row["next_run_at"],
                "last_run_at": row["last_run_at"],
                "created_at": row["created_at"],
                "modified_at": datetime.now(UTC),
            }
        )
    if rows:
        op.bulk_insert(schedules, rows)
    with op.batch_alter_table("report_schedules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_report_schedules_organisation"))
    op.drop_table("report_schedules")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_modified", ["modified_at"], unique=False)
        batch_op.create_index("ix_tasks_created", ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_created")
        batch_op.drop_index("ix_tasks_modified")
    op.create_table(
        "report_schedules",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=128), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["organisation"], ["organisations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("report_schedules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_report_schedules_organisation"), ["organisation"], unique=False)
    op.execute(
        "INSERT INTO report_schedules (id, organisation, cron, data, enabled, next_run_at, last_run_at, created_at) "
        "SELECT id, organisation, schedule, data, enabled, deadline_at, last_run_at, created_at FROM schedules "
        "WHERE scheduler_id = 'report' AND schedule IS NOT NULL AND deadline_at IS NOT NULL"
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_index("ix_schedules_created")
        batch_op.drop_index("ix_schedules_due")
    op.drop_table("schedules")
