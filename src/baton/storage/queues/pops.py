"""The SQL of every pop: the locking SELECT of the best queued tasks and the UPDATE that dispatches them,
one statement per pop on PostgreSQL (one round trip, safe in autocommit).

A pop's statement has a shape (`core.queueing.PopShape`): one queue or a type (in fair or strict order),
skipping capped queues or not, and plain or `together`: a boefje pop that hands out a deduplication
group (mula's pop_boefje: the head task and, when it carries a `deduplication_key`, the queued tasks of
its type sharing it). `build_pop` builds any shape, with a filter condition or without; `PopStatement`
is a shape built once, which the API's queue door (queue_door.py) and the schedulers' pops
(queues.py) send.

Ordering: lower `priority` first; ties oldest first (`seq`) within a queue, by the fair-queuing tag
`fair_key` across organisations when fairness is on (push_statements.py says how a push makes it).

The deduplication key lives in the task's `data`; migration 0013 indexes it for queued tasks that carry
one (`ix_tasks_queued_dedup_key`), over exactly the expression `key_column` gives, so finding a group is
an index lookup however long the queue, and tasks without a key cost the index nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    String,
    Update,
    and_,
    bindparam,
    func,
    literal_column,
    select,
    union_all,
    update,
)

from baton.core.model import TaskStatus
from baton.core.queueing import PopShape, PopTarget
from baton.storage.queues.statements import TASKS, Dialect, compiled_sql, task_columns
from baton.storage.tables import IS_QUEUED, Organisation, QueueCounter, Scheduler, Task


def capped_queues() -> Select[Any]:
    """Queues of the type whose organisation has `max_in_flight` tasks out already."""
    return (
        select(QueueCounter.scheduler_id)
        .join(Scheduler, Scheduler.id == QueueCounter.scheduler_id)
        .join(Organisation, Organisation.id == Scheduler.organisation)
        .where(Organisation.max_in_flight.is_not(None), Scheduler.type == bindparam("type_"))
        .group_by(QueueCounter.scheduler_id, Organisation.max_in_flight)
        .having(func.sum(QueueCounter.in_flight) >= Organisation.max_in_flight)
    )


def pop_candidates(
    target: PopTarget, *, condition: ColumnElement[bool] | None = None, caps: bool = False, columns: Sequence[Any] = ()
) -> Select[Any]:
    """The pop's locking SELECT of `seq` (and `columns`): up to `:limit_` queued tasks, best first."""
    candidates = select(Task.seq, *columns).where(IS_QUEUED)
    if target.queue is not None:
        candidates = candidates.where(Task.scheduler_id == bindparam("queue_")).order_by(*pop_order(target))
    else:
        candidates = candidates.where(Task.type == bindparam("type_"))
        if caps:
            candidates = candidates.where(Task.scheduler_id.not_in(capped_queues()))
        candidates = candidates.order_by(*pop_order(target))
    if condition is not None:
        candidates = candidates.where(condition)
    return candidates.limit(bindparam("limit_")).with_for_update(skip_locked=True)


def pop_order(target: PopTarget) -> tuple[Any, ...]:
    """Hand-out order: by priority, then the fair tag (a fair pop across organisations), then age."""
    if target.type is not None and target.fair:
        return (Task.priority, Task.fair_key, Task.seq)
    return (Task.priority, Task.seq)


def claim(candidates: Select[Any], dialect: Dialect, raw_data: bool = False) -> Update:
    """Dispatch the tasks `candidates` (a locking SELECT of `seq`) chooses; parameter `:now_`."""
    if dialect == "postgresql":
        # A materialised CTE runs the locking SELECT exactly once; as an `IN (subquery)` the planner
        # may re-run it per outer row and dispatch more than `limit` tasks (a test caught that).
        claimed = candidates.cte("claimed").prefix_with("MATERIALIZED")
        chosen = and_(Task.seq.in_(select(claimed.c.seq)), IS_QUEUED)
    else:
        # Writers are serialised here, so the sub-select's rows are still queued. No second status
        # test: with it, SQLite scans every queued row by status instead of looking up the rowids.
        chosen = Task.seq.in_(candidates.scalar_subquery())
    return (
        update(TASKS)
        .where(chosen)
        .values(
            status=TaskStatus.DISPATCHED.value,
            modified_at=bindparam("now_"),
            receipt=bindparam("receipt_", type_=Task.receipt.type),
        )
        .returning(*task_columns(raw_data), TASKS.c.seq, TASKS.c.fair_key, TASKS.c.receipt)
    )


# The indexed expression, per dialect (migration 0013 creates the index over the same text).
KEY_SQL: dict[Dialect, str] = {
    "postgresql": "(data ->> 'deduplication_key')",
    "sqlite": "json_extract(data, '$.deduplication_key')",
}


def key_column(dialect: Dialect) -> ColumnElement[Any]:
    return literal_column(KEY_SQL[dialect])


def companions(
    dialect: Dialect,
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
        candidates = candidates.where(Task.scheduler_id.not_in(capped_queues()))
    if condition is not None:
        candidates = candidates.where(condition)
    return candidates.order_by(Task.priority + 0, Task.seq).limit(bindparam("limit_")).with_for_update(skip_locked=True)


def together_statement(
    target: PopTarget,
    dialect: Dialect,
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
    rest = pop_candidates(target, condition=condition, caps=caps, columns=columns).cte("rest")
    if dialect == "postgresql":  # each locking SELECT runs exactly once (see `claim`)
        rest = rest.prefix_with("MATERIALIZED")
    order = [rest.c[column.key] for column in pop_order(target)]
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
    # SQLite: no second status test, as in `claim` (with it, SQLite scans the queued rows by
    # status instead of looking the chosen ones up); its writers are serialised, they are still queued.
    chosen_queued = and_(Task.seq.in_(chosen), IS_QUEUED) if dialect == "postgresql" else Task.seq.in_(chosen)
    return (
        update(TASKS)
        .where(chosen_queued)
        .values(
            status=TaskStatus.DISPATCHED.value,
            modified_at=bindparam("now_"),
            receipt=bindparam("receipt_", type_=Task.receipt.type),
        )
        .returning(
            *task_columns(raw_data),
            TASKS.c.seq,
            TASKS.c.fair_key,
            TASKS.c.receipt,
        )
    )


def build_pop(
    shape: PopShape, dialect: Dialect, condition: ColumnElement[bool] | None = None, raw_data: bool = False
) -> Update:
    """The pop statement of a shape. Parameters: `:queue_` or `:type_`, `:limit_`, `:now_`, `:receipt_`
    (the pop's receipt, stamped on what it hands out: core/receipts.py). `raw_data`: `data` returned as
    JSON text, for answers that pass it through untouched."""
    target = PopTarget(queue="?", fair=shape.fair) if shape.by_queue else PopTarget(type="?", fair=shape.fair)
    if shape.together:
        return together_statement(target, dialect, caps=shape.caps, raw_data=raw_data, condition=condition)
    return claim(pop_candidates(target, condition=condition, caps=shape.caps), dialect, raw_data)


@dataclass(frozen=True)
class PopStatement:
    """A pop without a filter: one statement per shape, built (and compiled) once. Building it and
    SQLAlchemy's cache key for it took longer than running it on SQLite."""

    shape: PopShape
    raw_data: bool = True

    def build(self, dialect: Dialect) -> Update:
        return _built(self, dialect)


@cache
def _built(statement: PopStatement, dialect: Dialect) -> Update:
    return build_pop(statement.shape, dialect, raw_data=statement.raw_data)


@cache
def pop_sql(dialect: Dialect = "postgresql", by_type: bool = False, fair: bool = True) -> str:
    """The pop statement as the database receives it: for the README, the benchmarks and a snapshot
    test, so nobody keeps a hand copy."""
    shape = PopShape(together=False, by_queue=not by_type, fair=fair, caps=False)
    return compiled_sql(build_pop(shape, dialect), dialect)
