"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 14:21:22.247400
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "organisations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "plugins",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("consumes", sa.JSON(), nullable=False),
        sa.Column("scan_level", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "boefje_runs",
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("boefje_id", sa.String(length=128), nullable=False),
        sa.Column("object_key", sa.String(length=512), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["organisation"], ["organisations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("organisation", "boefje_id", "object_key"),
    )
    op.create_table(
        "plugin_settings",
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("plugin_id", sa.String(length=128), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["organisation"], ["organisations.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["plugin_id"], ["plugins.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("organisation", "plugin_id"),
    )
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

    op.create_table(
        "schedulers",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("maxsize", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("runner", sa.String(length=32), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("location", sa.String(length=256), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["organisation"], ["organisations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("schedulers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_schedulers_organisation"), ["organisation"], unique=False)

    op.create_table(
        "events",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("scheduler_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["scheduler_id"], ["schedulers.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_events_pending",
            ["scheduler_id", "seq"],
            unique=False,
            postgresql_where=sa.text("consumed_at IS NULL"),
            sqlite_where=sa.text("consumed_at IS NULL"),
        )

    op.create_table(
        "tasks",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scheduler_id", sa.String(length=128), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=True),
        sa.Column("organisation", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("hash", sa.String(length=256), nullable=True),
        sa.Column(
            "data",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["scheduler_id"], ["schedulers.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tasks_pop",
            ["scheduler_id", "priority", "seq"],
            unique=False,
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        )
        batch_op.create_index("ix_tasks_scheduler_status", ["scheduler_id", "status", "seq"], unique=False)
        batch_op.create_index("ix_tasks_scheduler_hash", ["scheduler_id", "hash"], unique=False)
        batch_op.create_index("ix_tasks_status_modified", ["status", "modified_at"], unique=False)
        batch_op.create_index(
            "ix_tasks_type_pop",
            ["type", "priority", "seq"],
            unique=False,
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        )
        batch_op.create_index(
            "uq_tasks_queued_hash",
            ["scheduler_id", "hash"],
            unique=True,
            postgresql_where=sa.text("status = 'queued' AND hash IS NOT NULL"),
            sqlite_where=sa.text("status = 'queued' AND hash IS NOT NULL"),
        )


def downgrade() -> None:

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_tasks_queued_hash",
            postgresql_where=sa.text("status = 'queued' AND hash IS NOT NULL"),
            sqlite_where=sa.text("status = 'queued' AND hash IS NOT NULL"),
        )
        batch_op.drop_index(
            "ix_tasks_type_pop",
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        )
        batch_op.drop_index("ix_tasks_status_modified")
        batch_op.drop_index("ix_tasks_scheduler_hash")
        batch_op.drop_index("ix_tasks_scheduler_status")
        batch_op.drop_index(
            "ix_tasks_pop",
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        )

    op.drop_table("tasks")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_events_pending",
            postgresql_where=sa.text("consumed_at IS NULL"),
            sqlite_where=sa.text("consumed_at IS NULL"),
        )

    op.drop_table("events")
    with op.batch_alter_table("schedulers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_schedulers_organisation"))

    op.drop_table("schedulers")
    with op.batch_alter_table("report_schedules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_report_schedules_organisation"))

    op.drop_table("report_schedules")
    op.drop_table("plugin_settings")
    op.drop_table("boefje_runs")
    op.drop_table("plugins")
    op.drop_table("organisations")
