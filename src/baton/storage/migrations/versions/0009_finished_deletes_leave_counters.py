"""Deleting finished tasks leaves the queue counters alone (retention removes them by the million)

Revision ID: 0009
Revises: 0008
Create Date: 2027-01-05 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 0004's delete trigger upserted every queue of a deleted batch, with deltas of zero for finished
# tasks: a write (and a row lock held until commit) on the counter rows that pops and pushes of
# those queues update too. Only queued and in-flight tasks count, so only they are counted now.
COUNTED = "('queued', 'dispatched', 'running')"
SHARD = "pg_backend_pid() % 8"
POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION baton_count_deleted() RETURNS trigger AS $$
BEGIN
  INSERT INTO queue_counters AS c (scheduler_id, shard, queued, in_flight, last_key)
  SELECT scheduler_id, {shard}, -sum((status = 'queued')::int), -sum((status IN ('dispatched', 'running'))::int), 0
  FROM old_rows {where} GROUP BY scheduler_id
  ON CONFLICT (scheduler_id, shard) DO UPDATE
    SET queued = c.queued + EXCLUDED.queued,
        in_flight = c.in_flight + EXCLUDED.in_flight,
        last_key = greatest(c.last_key, EXCLUDED.last_key);
  RETURN NULL;
END
$$ LANGUAGE plpgsql
"""
SQLITE_TRIGGER = """
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks {when} BEGIN
  UPDATE queue_counters
    SET queued = queued - (CASE WHEN OLD.status = 'queued' THEN 1 ELSE 0 END),
        in_flight = in_flight - (CASE WHEN OLD.status IN ('dispatched', 'running') THEN 1 ELSE 0 END)
  WHERE scheduler_id = OLD.scheduler_id AND shard = 0;
END
"""


def _replace(only_counted: bool) -> None:
    if op.get_bind().dialect.name == "postgresql":
        where = f"WHERE status IN {COUNTED}" if only_counted else ""
        op.execute(POSTGRES_FUNCTION.format(shard=SHARD, where=where))
    else:
        op.execute("DROP TRIGGER IF EXISTS tasks_count_delete")
        op.execute(SQLITE_TRIGGER.format(when=f"WHEN OLD.status IN {COUNTED}" if only_counted else ""))


def upgrade() -> None:
    _replace(only_counted=True)


def downgrade() -> None:
    _replace(only_counted=False)
