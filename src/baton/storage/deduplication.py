"""Deduplication in the database: a boefje pop that hands out the tasks sharing a `deduplication_key`
together (mula's pop_boefje), and the writes of twin tasks (ingest/planners/twins.py).

The key lives in the task's `data`; migration 0013 indexes it for queued tasks that carry one
(`ix_tasks_queued_dedup_key`), over exactly the expression `key_column` gives, so finding a group is an
index lookup however long the queue, and tasks without a key cost the index nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    String,
    Update,
    and_,
    bindparam,
    literal_column,
    select,
    union_all,
    update,
)

from baton.core.deduplication import KEY
from baton.core.filters import FilterTree
from baton.core.model import TaskStatus
from baton.core.queueing import PopTarget
from baton.storage import queues, statements
from baton.storage.engine import on_postgresql
from baton.storage.filters import compile_tree
from baton.storage.push import Executable, as_dict
from baton.storage.tables import IS_QUEUED, Task

# The indexed expression, per dialect (migration 0013 creates the index over the same text).
KEY_SQL: dict[statements.Dialect, str] = {
    "postgresql": "(data ->> 'deduplication_key')",
    "sqlite": "json_extract(data, '$.deduplication_key')",
}


def key_column(dialect: statements.Dialect) -> ColumnElement[Any]:
    return literal_column(KEY_SQL[dialect])


def companions(
    dialect: statements.Dialect,
    *,
    caps: bool,
    condition: ColumnElement[bool] | None = None,
    key: Any = None,
    task_type: Any = None,
) -> Select[Any]:
    """The locking SELECT of a group: queued tasks of a type (`:type_`) whose key is `key` (`:key_`), up
    to `:limit_`, priority then age first. A group is a few rows: the key's index finds them. Ordered by
    an expression no index gives, so that no planner walks the type's pop index in order, filtering by
    key, through the whole queue to save sorting a few rows (SQLite did, test_deduplicated_pop found)."""
    candidates = select(Task.seq)
    key = bindparam("key_", type_=String()) if key is None else key
    task_type = bindparam("type_") if task_type is None else task_type
    # `type || ''`: not the pop indexes' leading column, so the key's index is the one to use.
    candidates = candidates.where(IS_QUEUED, Task.type.concat("") == task_type, key_column(dialect) == key)
    if caps:
        candidates = candidates.where(Task.scheduler_id.not_in(statements.capped_queues()))
    if condition is not None:
        candidates = candidates.where(condition)
    return candidates.order_by(Task.priority + 0, Task.seq).limit(bindparam("limit_")).with_for_update(skip_locked=True)


def together_statement(
    target: PopTarget,
    dialect: statements.Dialect,
    *,
    caps: bool,
    raw_data: bool,
    condition: ColumnElement[bool] | None = None,
) -> Update:
    """A boefje pop of up to `:limit_` tasks in one statement: the ordinary pop's candidates (`rest`), the
    first of them (`head`) and, when the head carries a key, the queued tasks of its type sharing it
    (`grp`, any organisation). Dispatched: the head, then `grp` (a key) or the rest of `rest` (none).
    Parameters as the pop's: `:queue_` or `:type_`, `:limit_`, `:now_`, `:receipt_` (the pop's receipt,
    core/receipts.py: a pop answered with an error gives its tasks back).

    With a key, the rows `rest` locked beyond the head are let go at the statement's end untouched (a
    concurrent pop skips them meanwhile, as any locked row)."""
    key = key_column(dialect)
    columns = (Task.type, key.label("k"), Task.priority, Task.fair_key)
    rest = statements.pop_candidates(target, condition=condition, caps=caps, columns=columns).cte("rest")
    if dialect == "postgresql":  # each locking SELECT runs exactly once (see statements.claim)
        rest = rest.prefix_with("MATERIALIZED")
    order = [rest.c[column.key] for column in statements.pop_order(target)]
    head = select(rest.c.seq, rest.c.type, rest.c.k).order_by(*order).limit(1).cte("head")
    head_seq = select(head.c.seq).scalar_subquery()
    head_key = select(head.c.k).scalar_subquery()
    same_key = companions(
        dialect, caps=caps, condition=condition, key=head_key, task_type=select(head.c.type).scalar_subquery()
    )
    group = same_key.where(Task.seq != head_seq).limit(bindparam("limit_") - 1).cte("grp")
    if dialect == "postgresql":
        group = group.prefix_with("MATERIALIZED")
    chosen = union_all(
        select(head.c.seq),
        select(rest.c.seq).where(head_key.is_(None), rest.c.seq != head_seq),
        select(group.c.seq),
    )
    # SQLite: no second status test, as in statements.claim (with it, SQLite scans the queued rows by
    # status instead of looking the chosen ones up); its writers are serialised, they are still queued.
    chosen_queued = and_(Task.seq.in_(chosen), IS_QUEUED) if dialect == "postgresql" else Task.seq.in_(chosen)
    return (
        update(statements.TASKS)
        .where(chosen_queued)
        .values(
            status=TaskStatus.DISPATCHED.value,
            modified_at=bindparam("now_"),
            receipt=bindparam("receipt_", type_=Task.receipt.type),
        )
        .returning(
            *statements.task_columns(raw_data),
            statements.TASKS.c.seq,
            statements.TASKS.c.fair_key,
            statements.TASKS.c.receipt,
        )
    )


@cache
def plain_together(by_queue: bool, fair: bool, dialect: statements.Dialect, caps: bool, raw_data: bool) -> Update:
    """`together_statement` without a filter, built once per kind."""
    target = PopTarget(queue="?", fair=fair) if by_queue else PopTarget(type="?", fair=fair)
    return together_statement(target, dialect, caps=caps, raw_data=raw_data)


def pop_together(
    executable: Executable,
    target: PopTarget,
    *,
    limit: int,
    now: datetime,
    tree: FilterTree | None = None,
    caps: bool = False,
    raw_data: bool = False,
    receipt: uuid.UUID | None = None,
) -> list[dict[str, Any]]:
    """A boefje pop of up to `limit` tasks: the head task and, when it carries a key, the queued tasks of
    its type sharing that key (any organisation, the filter applied to them too), else the next tasks as
    any pop; one statement, every task to one caller only."""
    dialect: statements.Dialect = "postgresql" if on_postgresql(executable) else "sqlite"
    if tree is None:
        statement = plain_together(target.queue is not None, target.fair, dialect, caps, raw_data)
    else:
        condition = compile_tree(tree, dialect)
        statement = together_statement(target, dialect, caps=caps, raw_data=raw_data, condition=condition)
    params: dict[str, Any] = {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now}
    params["receipt_"] = receipt or uuid.uuid4()
    return queues.sort_popped([as_dict(row) for row in executable.execute(statement, params)], target)


# -- twins (written by the boefje scheduler that made the original) -----------------------------------


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
