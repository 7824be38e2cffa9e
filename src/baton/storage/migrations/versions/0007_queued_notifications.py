"""PostgreSQL: NOTIFY baton_queued (payload the queue id) when tasks become queued, for long-poll pops

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 12:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Whatever queues a task (an API push, a scheduler in its own process, recovery, a runner handing a
# task back) wakes the API processes' waiting pops: the database says so, not the writer.
# Inserts: one statement-level trigger, one notification per statement and queue (a batch of 500
# tasks for one queue is one notification). Re-queues: a row trigger whose WHEN clause is checked
# without calling the function, so a pop (queued -> dispatched) pays nothing; PostgreSQL folds equal
# notifications of one transaction into one. Both are delivered at commit, when a pop can see the task.
CHANNEL = "baton_queued"
POSTGRES_STATEMENTS = [
    f"""
CREATE FUNCTION baton_notify_inserted() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', queue_id)
  FROM (SELECT DISTINCT scheduler_id AS queue_id FROM new_rows WHERE status = 'queued') AS queued;
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    f"""
CREATE FUNCTION baton_notify_requeued() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', NEW.scheduler_id);
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    """CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION baton_notify_inserted()""",
    """CREATE TRIGGER tasks_notify_requeue AFTER UPDATE OF status ON tasks
       FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued')
       EXECUTE FUNCTION baton_notify_requeued()""",
]


def upgrade() -> None:
    # SQLite has no NOTIFY: its API processes look again every BATON_POP_RECHECK_SECONDS.
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_STATEMENTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS tasks_notify_requeue ON tasks")
        op.execute("DROP TRIGGER IF EXISTS tasks_notify_insert ON tasks")
        op.execute("DROP FUNCTION IF EXISTS baton_notify_requeued()")
        op.execute("DROP FUNCTION IF EXISTS baton_notify_inserted()")
