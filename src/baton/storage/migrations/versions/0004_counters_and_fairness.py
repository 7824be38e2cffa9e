"""queue counters kept by triggers; fair-queuing tags; organisation weight and cap; plugin image

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Counters change in the same transaction as the task rows, whatever writes them (push, pop, a status
# change, recovery, a cascade): they cannot drift. On PostgreSQL each backend writes its own shard
# of a queue's row, so concurrent pops of one queue do not wait on each other's counter row.
POSTGRES_SHARDS = 8

# Statement-level triggers with transition tables: one counter upsert per statement and queue, not
# one per row (updating one row many times in one transaction is slow on PostgreSQL: every version
# stays until the transaction ends, and each update walks them).
SHARD = f"pg_backend_pid() % {POSTGRES_SHARDS}"
IS_QUEUED = "(status = 'queued')::int"
IS_FLYING = "(status IN ('dispatched', 'running'))::int"
UPSERT = """
  ON CONFLICT (scheduler_id, shard) DO UPDATE
    SET queued = c.queued + EXCLUDED.queued,
        in_flight = c.in_flight + EXCLUDED.in_flight,
        last_key = greatest(c.last_key, EXCLUDED.last_key)"""

POSTGRES_TRIGGERS = [
    f"""
CREATE FUNCTION baton_count_inserted() RETURNS trigger AS $$
BEGIN
  INSERT INTO queue_counters AS c (scheduler_id, shard, queued, in_flight, last_key)
  SELECT scheduler_id, {SHARD}, sum({IS_QUEUED}), sum({IS_FLYING}), max(fair_key)
  FROM new_rows GROUP BY scheduler_id
  {UPSERT};
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    f"""
CREATE FUNCTION baton_count_updated() RETURNS trigger AS $$
BEGIN
  INSERT INTO queue_counters AS c (scheduler_id, shard, queued, in_flight, last_key)
  SELECT n.scheduler_id, {SHARD},
         sum({IS_QUEUED.replace("status", "n.status")} - {IS_QUEUED.replace("status", "o.status")}),
         sum({IS_FLYING.replace("status", "n.status")} - {IS_FLYING.replace("status", "o.status")}),
         0
  FROM new_rows n JOIN old_rows o ON o.seq = n.seq
  WHERE n.status <> o.status
  GROUP BY n.scheduler_id
  {UPSERT};
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    f"""
CREATE FUNCTION baton_count_deleted() RETURNS trigger AS $$
BEGIN
  INSERT INTO queue_counters AS c (scheduler_id, shard, queued, in_flight, last_key)
  SELECT scheduler_id, {SHARD}, -sum({IS_QUEUED}), -sum({IS_FLYING}), 0
  FROM old_rows GROUP BY scheduler_id
  {UPSERT};
  RETURN NULL;
END
$$ LANGUAGE plpgsql
""",
    """CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION baton_count_inserted()""",
    """CREATE TRIGGER tasks_count_update AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION baton_count_updated()""",
    """CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows
       FOR EACH STATEMENT EXECUTE FUNCTION baton_count_deleted()""",
]

# SQLite serialises writers: one shard (0) is enough. One trigger per event, CASE for the deltas.
SQLITE_TRIGGERS = [
    """
CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks BEGIN
  INSERT INTO queue_counters (scheduler_id, shard, queued, in_flight, last_key)
  VALUES (NEW.scheduler_id, 0,
          CASE WHEN NEW.status = 'queued' THEN 1 ELSE 0 END,
          CASE WHEN NEW.status IN ('dispatched', 'running') THEN 1 ELSE 0 END,
          NEW.fair_key)
  ON CONFLICT (scheduler_id, shard) DO UPDATE
    SET queued = queued + excluded.queued,
        in_flight = in_flight + excluded.in_flight,
        last_key = max(last_key, excluded.last_key);
END
""",
    """
CREATE TRIGGER tasks_count_update AFTER UPDATE OF status ON tasks WHEN NEW.status <> OLD.status BEGIN
  INSERT INTO queue_counters (scheduler_id, shard, queued, in_flight, last_key)
  VALUES (NEW.scheduler_id, 0,
          (CASE WHEN NEW.status = 'queued' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'queued' THEN 1 ELSE 0 END),
          (CASE WHEN NEW.status IN ('dispatched', 'running') THEN 1 ELSE 0 END)
            - (CASE WHEN OLD.status IN ('dispatched', 'running') THEN 1 ELSE 0 END),
          0)
  ON CONFLICT (scheduler_id, shard) DO UPDATE
    SET queued = queued + excluded.queued, in_flight = in_flight + excluded.in_flight;
END
""",
    """
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks BEGIN
  UPDATE queue_counters
    SET queued = queued - (CASE WHEN OLD.status = 'queued' THEN 1 ELSE 0 END),
        in_flight = in_flight - (CASE WHEN OLD.status IN ('dispatched', 'running') THEN 1 ELSE 0 END)
  WHERE scheduler_id = OLD.scheduler_id AND shard = 0;
END
""",
]

BACKFILL = """
INSERT INTO queue_counters (scheduler_id, shard, queued, in_flight, last_key)
SELECT scheduler_id, 0,
       sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END),
       sum(CASE WHEN status IN ('dispatched', 'running') THEN 1 ELSE 0 END),
       0
FROM tasks GROUP BY scheduler_id
"""


def upgrade() -> None:
    with op.batch_alter_table("plugins", schema=None) as batch_op:
        batch_op.add_column(sa.Column("version", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("oci_image", sa.String(length=512), nullable=True))
    with op.batch_alter_table("organisations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("weight", sa.Integer(), server_default=sa.text("1"), nullable=False))
        batch_op.add_column(sa.Column("max_in_flight", sa.Integer(), nullable=True))
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fair_key", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
        batch_op.create_index(
            "ix_tasks_fair_pop",
            ["type", "priority", "fair_key", "seq"],
            unique=False,
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        )
    op.create_table(
        "queue_counters",
        sa.Column("scheduler_id", sa.String(length=128), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("queued", sa.BigInteger(), nullable=False),
        sa.Column("in_flight", sa.BigInteger(), nullable=False),
        sa.Column("last_key", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scheduler_id", "shard"),
    )
    op.execute(BACKFILL)
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_TRIGGERS:
            op.execute(statement)
    else:
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS tasks_count_{event} ON tasks")
        for event in ("inserted", "updated", "deleted"):
            op.execute(f"DROP FUNCTION IF EXISTS baton_count_{event}()")
    else:
        for name in ("tasks_count_insert", "tasks_count_update", "tasks_count_delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table("queue_counters")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_tasks_fair_pop",
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        )
        batch_op.drop_column("fair_key")
    with op.batch_alter_table("organisations", schema=None) as batch_op:
        batch_op.drop_column("max_in_flight")
        batch_op.drop_column("weight")
    with op.batch_alter_table("plugins", schema=None) as batch_op:
        batch_op.drop_column("oci_image")
        batch_op.drop_column("version")
