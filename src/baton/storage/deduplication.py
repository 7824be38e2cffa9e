"""Deduplication in the database: a boefje pop that hands out the tasks sharing a `deduplication_key`
together (mula's pop_boefje), and the writes of twin tasks (ingest/planners/twins.py).

The key lives in the task's `data`; migration 0014 indexes it for queued tasks that carry one
(`ix_tasks_queued_dedup_key`), over exactly the expression `key_column` gives, so finding a group is an
index lookup however long the queue, and tasks without a key cost the index nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Select, String, Update, bindparam, literal_column, select

from baton.core.deduplication import KEY, deduplication_key
from baton.core.filters import FilterTree
from baton.core.queueing import PopTarget
from baton.storage import queues, statements
from baton.storage.engine import on_postgresql
from baton.storage.filters import compile_tree
from baton.storage.push import Executable, as_dict
from baton.storage.tables import IS_QUEUED, Task

# The indexed expression, per dialect (migration 0014 creates the index over the same text).
INDEX = "ix_tasks_queued_dedup_key"
KEY_SQL: dict[statements.Dialect, str] = {
    "postgresql": "(data ->> 'deduplication_key')",
    "sqlite": "json_extract(data, '$.deduplication_key')",
}


def key_column(dialect: statements.Dialect) -> ColumnElement[Any]:
    return literal_column(KEY_SQL[dialect])


def companions_statement(
    dialect: statements.Dialect, *, caps: bool, raw_data: bool, condition: ColumnElement[bool] | None = None
) -> Update:
    """Dispatch up to `:limit_` queued tasks of type `:type_` whose key is `:key_`, of any organisation,
    priority then age first (SKIP LOCKED, as every pop). Parameters: `:type_`, `:key_`, `:limit_`, `:now_`."""
    return statements.claim(companions(dialect, caps=caps, condition=condition), dialect, raw_data)


def companions(dialect: statements.Dialect, *, caps: bool, condition: ColumnElement[bool] | None = None) -> Select[Any]:
    """The locking SELECT of `companions_statement`. A group is a few rows: the key's index finds them.
    Ordered by an expression no index gives, so that the planner does not walk the type's pop index in
    order, filtering by key, through the whole queue to save sorting a few rows; SQLite is told the index."""
    candidates = select(Task.seq)
    if dialect == "sqlite":
        candidates = candidates.with_hint(Task, f"INDEXED BY {INDEX}", "sqlite")
    candidates = candidates.where(
        IS_QUEUED, Task.type == bindparam("type_"), key_column(dialect) == bindparam("key_", type_=String())
    )
    if caps:
        candidates = candidates.where(Task.scheduler_id.not_in(statements.capped_queues()))
    if condition is not None:
        candidates = candidates.where(condition)
    return candidates.order_by(Task.priority + 0, Task.seq).limit(bindparam("limit_")).with_for_update(skip_locked=True)


@cache
def _plain_companions(dialect: statements.Dialect, caps: bool, raw_data: bool) -> Update:
    return companions_statement(dialect, caps=caps, raw_data=raw_data)


def pop_together(
    executable: Executable,
    target: PopTarget,
    *,
    limit: int,
    now: datetime,
    tree: FilterTree | None = None,
    caps: bool = False,
    raw_data: bool = False,
) -> list[dict[str, Any]]:
    """A boefje pop of up to `limit` tasks, in the caller's transaction: the head task, then, when it
    carries a key, the queued tasks of its type sharing that key (any organisation, the filter applied
    to them too), else the next `limit - 1` tasks as any pop. Every task to one caller only."""
    dialect: statements.Dialect = "postgresql" if on_postgresql(executable) else "sqlite"
    condition = compile_tree(tree, dialect) if tree is not None else None
    first = queues.pop(executable, target, limit=1, now=now, condition=condition, caps=caps, raw_data=raw_data)
    if not first or limit <= 1:
        return first
    key = deduplication_key(first[0]["data"])
    if key is None:
        more = queues.pop(
            executable, target, limit=limit - 1, now=now, condition=condition, caps=caps, raw_data=raw_data
        )
        return first + more
    if condition is None:
        statement = _plain_companions(dialect, caps, raw_data)
    else:
        statement = companions_statement(dialect, caps=caps, raw_data=raw_data, condition=condition)
    params = {"type_": first[0]["type"], "key_": key, "limit_": limit - 1, "now_": now}
    rows = [as_dict(row) for row in executable.execute(statement, params)]
    return first + sorted(rows, key=lambda row: (row["priority"], row["seq"]))


# -- twins (written by the boefje scheduler that made the original) -----------------------------------


def task_exists(executable: Executable, task_id: uuid.UUID) -> bool:
    return executable.execute(select(Task.seq).where(Task.id == task_id)).first() is not None


def mark_key(executable: Executable, task_id: uuid.UUID, data: Mapping[str, Any], key: str) -> bool:
    """Give a still-queued task its key (the original of a group: its own id); False when it was handed
    out meanwhile (its runner has it without the key; its twins still pop together)."""
    statement = (
        Task.__table__.update()  # type: ignore[attr-defined]
        .where(Task.id == bindparam("id_"), IS_QUEUED)
        .values(data=bindparam("data_"))
    )
    result = executable.execute(statement, {"id_": task_id, "data_": {**data, KEY: key}})
    return bool(getattr(result, "rowcount", 0))
