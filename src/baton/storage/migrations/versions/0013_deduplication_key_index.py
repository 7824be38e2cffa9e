"""Queued tasks that carry a deduplication_key, indexed by it (a boefje pop hands out a group together)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 08:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The expression storage/queues/pops.py's KEY_SQL queries, per dialect: the planner uses the index only
# for the same expression. Partial: tasks without a key (nearly all) are not in it at all.
KEY_SQL = {
    "postgresql": "(data ->> 'deduplication_key')",
    "sqlite": "json_extract(data, '$.deduplication_key')",
}
INDEX = "ix_tasks_queued_dedup_key"


def upgrade() -> None:
    key = KEY_SQL["postgresql" if op.get_bind().dialect.name == "postgresql" else "sqlite"]
    op.execute(f"CREATE INDEX {INDEX} ON tasks ({key}) WHERE status = 'queued' AND {key} IS NOT NULL")


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")
