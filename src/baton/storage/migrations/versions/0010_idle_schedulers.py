"""Idle schedulers cost nothing: lease holders renewed once per process, wake-ups by NOTIFY

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Inputs (an event in a scheduler's inbox, a schedule due now) wake the process that runs the
# scheduler at commit, whoever wrote them (the API, the OpenKAT event router, another process): the
# payload is the scheduler's id. One notification per statement and scheduler for inserted events
# (PostgreSQL folds equal ones of a transaction into one). A schedule notifies only when it becomes
# due now; a later deadline is found by the process's look for due schedules every poll interval.
# A scheduler row inserted or deleted (an organisation created or deleted) wakes the workers, whose
# shares change (storage/pool_changes.py's channel).
INPUTS_CHANNEL = "baton_inputs"
WORKERS_CHANNEL = "baton_workers"
POSTGRES_STATEMENTS = [
    f"""
CREATE FUNCTION baton_notify_events() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('{INPUTS_CHANNEL}', scheduler_id)
  FROM (SELECT DISTINCT scheduler_id FROM new_rows WHERE consumed_at IS NULL) AS pending;
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    """CREATE TRIGGER events_notify_insert AFTER INSERT ON events REFERENCING NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION baton_notify_events()""",
    f"""
CREATE FUNCTION baton_notify_schedule() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('{INPUTS_CHANNEL}', NEW.scheduler_id || '-' || NEW.organisation);
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    """CREATE TRIGGER schedules_notify_insert AFTER INSERT ON schedules
       FOR EACH ROW WHEN (NEW.enabled AND NEW.deadline_at <= now())
       EXECUTE FUNCTION baton_notify_schedule()""",
    """CREATE TRIGGER schedules_notify_update AFTER UPDATE OF deadline_at, enabled ON schedules
       FOR EACH ROW WHEN (NEW.enabled AND NEW.deadline_at <= now()
                          AND (NOT OLD.enabled OR OLD.deadline_at IS NULL OR OLD.deadline_at > now()))
       EXECUTE FUNCTION baton_notify_schedule()""",
    f"""
CREATE FUNCTION baton_notify_pool() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('{WORKERS_CHANNEL}', '');
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    """CREATE TRIGGER schedulers_notify_pool AFTER INSERT OR DELETE ON schedulers
       FOR EACH STATEMENT EXECUTE FUNCTION baton_notify_pool()""",
]


def upgrade() -> None:
    op.create_table(
        "lease_holders",
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner"),
    )
    postgresql = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("schedulers") as schedulers:
        schedulers.drop_index("ix_schedulers_owner")
        schedulers.create_index("ix_schedulers_owner_term", ["owner", "term"])
        schedulers.create_index("ix_schedulers_lease_expires", ["lease_expires_at"])
        schedulers.create_index(
            "ix_schedulers_owner_disabled",
            ["owner"],
            postgresql_where=sa.text("NOT enabled"),
            sqlite_where=sa.text("enabled = 0"),
        )
    with op.batch_alter_table("schedules") as schedules:
        schedules.create_index(
            "ix_schedules_deadline_enabled",
            ["deadline_at"],
            postgresql_where=sa.text("enabled"),
            sqlite_where=sa.text("enabled = 1"),
        )
    if postgresql:  # SQLite has no NOTIFY: its processes look every poll interval
        for statement in POSTGRES_STATEMENTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS schedulers_notify_pool ON schedulers")
        op.execute("DROP TRIGGER IF EXISTS schedules_notify_update ON schedules")
        op.execute("DROP TRIGGER IF EXISTS schedules_notify_insert ON schedules")
        op.execute("DROP TRIGGER IF EXISTS events_notify_insert ON events")
        op.execute("DROP FUNCTION IF EXISTS baton_notify_pool()")
        op.execute("DROP FUNCTION IF EXISTS baton_notify_schedule()")
        op.execute("DROP FUNCTION IF EXISTS baton_notify_events()")
    with op.batch_alter_table("schedules") as schedules:
        schedules.drop_index("ix_schedules_deadline_enabled")
    with op.batch_alter_table("schedulers") as schedulers:
        schedulers.drop_index("ix_schedulers_owner_disabled")
        schedulers.drop_index("ix_schedulers_lease_expires")
        schedulers.drop_index("ix_schedulers_owner_term")
        schedulers.create_index("ix_schedulers_owner", ["owner"])
    op.drop_table("lease_holders")
