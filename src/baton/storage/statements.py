"""Named statements: every statement a queue runs, built once with SQLAlchemy Core.

`pop`, `push` and `change_status` are the hot path. Each is one statement on PostgreSQL (one round
trip, safe in autocommit) and a short transaction of a few statements on SQLite, whose writers are
serialised anyway. They are compiled once per variant and sent by whichever executor runs them
(`executors.py`: psycopg's async pool for the API on PostgreSQL, a SQLAlchemy connection otherwise,
or the caller's own session when a scheduler pushes inside its ingest transaction).

Ordering: lower `priority` first. A pop from one queue takes ties oldest first (`seq`). A pop across
organisations (by type) takes ties by the fair-queuing tag `fair_key` when fairness is on:

    fair_key(new task) = max(min(queue's last tag + step, head + queued * step), head)
    step = UNIT / organisation weight; head = smallest queued tag at this type and priority;
    queued = the queue's queued tasks

(`baton.core.fairness.fair_tag` is the same arithmetic in Python, for the batched push.)

This is start-time fair queuing: tasks are served in order of their start tags; a backlogged
organisation's tags run far ahead, while a task of a quiet organisation starts at the current head
(it cannot bank credit while idle) and so is served within one round of the organisations that have
work: with K organisations backlogged, pops go round robin, each getting 1/K (weight w: w/sum).
The tag is computed when the task is pushed, so a pop is still one index scan (`ix_tasks_fair_pop`),
whatever the number of organisations or queued tasks; the queue's clock (`queue_counters.last_key`)
is kept by the same trigger that counts the queue, in the same transaction.

The `min` bounds an organisation's lead over the head by its own backlog. Without it a clock goes
stale: an organisation whose backlog drained long ago, or that was served an urgent backlog at another
priority (one clock serves every priority), or whose priority emptied (the head starts again from
0) would find its next task behind everybody else's backlog. With it, a queue with nothing queued
starts at the head (after the tasks already there: ties go by `seq`), and a backlogged queue, whose
tags run on from the head one step per task, is not affected.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    Table,
    Text,
    Update,
    and_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    literal_column,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from baton.core.admission import OnDuplicate
from baton.core.fairness import FAIR_UNIT
from baton.core.lifecycle import may_precede
from baton.core.model import TaskStatus
from baton.core.queueing import PopTarget
from baton.storage.tables import IS_QUEUED, QUEUED_WITH_HASH, Organisation, QueueCounter, Scheduler, Task

# Statements are Core (table-level), not ORM: results are plain rows, no identity map to keep in step.
# Bound parameters end in `_`: a parameter named like a column would also be SET by a Core UPDATE.
TASKS: Table = Task.__table__  # type: ignore[assignment]
Dialect = Literal["postgresql", "sqlite"]


def task_columns(raw_data: bool = False) -> list[Any]:
    """What every statement returns about a task. `raw_data`: `data` as JSON text, not parsed, for
    answers that pass it through to the client untouched."""
    c = TASKS.c
    data: Any = cast(c.data, Text).label("data") if raw_data else c.data
    return [
        c.id,
        c.scheduler_id,
        c.schedule_id,
        c.organisation,
        c.type,
        c.priority,
        c.status,
        c.hash,
        data,
        c.attempts,
        c.reason,
        c.created_at,
        c.modified_at,
    ]


# -- pop ---------------------------------------------------------------------------------------------


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


def pop(
    target: PopTarget,
    dialect: Dialect,
    *,
    condition: ColumnElement[bool] | None = None,
    caps: bool = False,
    raw_data: bool = False,
) -> Update:
    """Hand out up to `:limit_` queued tasks (now `dispatched`, `modified_at` = `:now_`, stamped with the
    pop's `:receipt_`: core/receipts.py), in the same statement.

    Parameters: `:queue_` or `:type_`, `:limit_`, `:now_`, `:receipt_`. `caps`: skip queues at their organisation's
    `max_in_flight` (only worth its cost when some organisation has a cap).
    """
    return claim(pop_candidates(target, condition=condition, caps=caps), dialect, raw_data)


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


@cache
def plain_pop(by_queue: bool, fair: bool, dialect: Dialect, caps: bool = False, raw_data: bool = False) -> Update:
    """The pop without a filter, built once per kind: building it and SQLAlchemy's cache key for it
    took longer than running it on SQLite."""
    target = PopTarget(queue="?", fair=fair) if by_queue else PopTarget(type="?", fair=fair)
    return pop(target, dialect, caps=caps, raw_data=raw_data)


@cache
def pop_sql(dialect: Dialect = "postgresql", by_type: bool = False, fair: bool = True) -> str:
    """The pop statement as the database receives it: for the README, the benchmarks and a snapshot
    test, so nobody keeps a hand copy."""
    target = PopTarget(type="boefje", fair=fair) if by_type else PopTarget(queue="boefje-acme")
    return compiled_sql(pop(target, dialect), dialect)


# -- push --------------------------------------------------------------------------------------------


def _queue_row() -> Select[Any]:
    counters = (
        select(
            func.coalesce(func.sum(QueueCounter.queued), 0).label("queued"),
            func.coalesce(func.max(QueueCounter.last_key), 0).label("last_key"),
        )
        .where(QueueCounter.scheduler_id == bindparam("queue_"))
        .subquery("counts")
    )
    return (
        select(
            Scheduler.id,
            Scheduler.organisation,
            Scheduler.type,
            Scheduler.maxsize,
            # A retired organisation's queues take no task, as a disabled queue (storage/organisation_sync.py).
            and_(Scheduler.enabled, Organisation.retired_at.is_(None)).label("enabled"),
            Organisation.weight,
            counters.c.queued,
            counters.c.last_key,
        )
        .join(Organisation, Organisation.id == Scheduler.organisation)
        .join(counters, true())
        .where(Scheduler.id == bindparam("queue_"))
    )


def _head_tag(task_type: Any) -> Any:
    """The smallest queued fair tag at this type and priority: the fair queue's virtual time."""
    return (
        select(func.min(Task.fair_key))
        .where(IS_QUEUED, Task.type == task_type, Task.priority == bindparam("priority_"))
        .scalar_subquery()
    )


def _new_tag(queue: Any, greatest: Any, least: Any) -> Any:
    """max(min(queue clock + one step, head + queued steps), head): see the module's description.
    The SQL twin of `baton.core.fairness.fair_tag` (which the batched push uses): change both."""
    # `op("/")`: integer division on both backends (SQLAlchemy's `/` would cast to NUMERIC).
    step = literal_column(str(FAIR_UNIT)).op("/")(queue.c.weight)
    head = func.coalesce(_head_tag(queue.c.type), 0)
    backlog = cast(queue.c.queued, BigInteger)
    return greatest(least(queue.c.last_key + step, head + backlog * step), head)


def _insert_values(queue: Any, tag: Any) -> Select[Any]:
    return select(
        bindparam("id_", type_=Task.id.type),
        queue.c.id,
        bindparam("schedule_id_", type_=Task.schedule_id.type),
        queue.c.organisation,
        queue.c.type,
        bindparam("priority_", type_=Task.priority.type),
        literal(TaskStatus.QUEUED.value),
        bindparam("hash_", type_=Task.hash.type),
        bindparam("data_", type_=Task.data.type),
        tag,
        literal(0),
        bindparam("now_", type_=Task.created_at.type),
        bindparam("now_", type_=Task.modified_at.type),
    )


INSERTED_COLUMNS = [
    Task.id,
    Task.scheduler_id,
    Task.schedule_id,
    Task.organisation,
    Task.type,
    Task.priority,
    Task.status,
    Task.hash,
    Task.data,
    Task.fair_key,
    Task.attempts,
    Task.created_at,
    Task.modified_at,
]


@cache
def push_postgresql(on_duplicate: OnDuplicate = "reprioritise", raw_data: bool = False) -> Select[Any]:
    """Push as one PostgreSQL statement: dedup, maxsize, fair tag and insert in one round trip.

    Parameters: `:queue_`, `:id_`, `:schedule_id_`, `:priority_`, `:hash_`, `:data_`, `:now_`. The answer is
    one row (none: unknown queue) with the queue's `enabled`, `maxsize` and `queued`, and the task
    with `outcome` 'created' or 'updated' (a queued twin with this hash got the new priority) or
    'duplicate' (`refuse`: the twin is left alone), or no task (disabled or full).

    The conditions are the admission rule's (`baton.core.admission`) in SQL: the push reads this
    answer through `admit`, and an integration test checks that the two agree for every case.
    """
    queue = _queue_row().cte("queue")
    open_queue = select(queue.c.id).where(queue.c.enabled).exists()
    twin_match = and_(
        Task.scheduler_id == bindparam("queue_"),
        Task.hash == bindparam("hash_"),
        IS_QUEUED,
        open_queue,
    )
    if on_duplicate == "reprioritise":
        twin = (
            update(TASKS)
            .where(twin_match)
            .values(priority=bindparam("priority_"), modified_at=bindparam("now_", type_=Task.modified_at.type))
            .returning(*task_columns(raw_data), literal("updated").label("outcome"))
            .cte("twin")
        )
    else:
        twin = select(*task_columns(raw_data), literal("duplicate").label("outcome")).where(twin_match).cte("twin")
    tag = _new_tag(queue, func.greatest, func.least)
    room = (queue.c.maxsize == 0) | (queue.c.queued < queue.c.maxsize)
    values = _insert_values(queue, tag).where(queue.c.enabled, room, ~select(twin.c.id).exists())
    insert = postgresql.insert(TASKS).from_select([column.key for column in INSERTED_COLUMNS], values)
    if on_duplicate == "reprioritise":
        insert = insert.on_conflict_do_update(
            index_elements=[Task.scheduler_id, Task.hash],
            index_where=literal_column(QUEUED_WITH_HASH),
            set_={"priority": insert.excluded.priority, "modified_at": insert.excluded.modified_at},
        )
    else:
        insert = insert.on_conflict_do_nothing(
            index_elements=[Task.scheduler_id, Task.hash], index_where=literal_column(QUEUED_WITH_HASH)
        )
    created: Any = literal_column("CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END").label("outcome")
    inserted = insert.returning(*task_columns(raw_data), created).cte("inserted")
    task = union_all(select(twin), select(inserted)).subquery("task")
    return select(queue.c.enabled, queue.c.maxsize, queue.c.queued, task).select_from(queue.outerjoin(task, true()))


@cache
def queue_for_push() -> Select[Any]:
    """SQLite, step 1: the queue's settings and counts (also says whether it exists)."""
    return _queue_row()


@cache
def reprioritise_twin(raw_data: bool = False) -> Update:
    """SQLite, step 2: a queued task with this hash gets the new priority (no twin is created)."""
    return (
        update(TASKS)
        .where(Task.scheduler_id == bindparam("queue_"), Task.hash == bindparam("hash_"), IS_QUEUED)
        .values(priority=bindparam("priority_"), modified_at=bindparam("now_", type_=Task.modified_at.type))
        .returning(*task_columns(raw_data))
    )


@cache
def queued_twin(raw_data: bool = False) -> Select[Any]:
    return select(*task_columns(raw_data)).where(
        Task.scheduler_id == bindparam("queue_"), Task.hash == bindparam("hash_"), IS_QUEUED
    )


@cache
def insert_task(raw_data: bool = False) -> Any:
    """SQLite, step 3: the new task, its fair tag computed in the same statement."""
    queue = _queue_row().subquery("queue")
    tag = _new_tag(queue, func.max, func.min)  # SQLite's two-argument max() and min(): greatest(), least()
    values = _insert_values(queue, tag)
    return (
        sqlite.insert(TASKS)
        .from_select([column.key for column in INSERTED_COLUMNS], values)
        .returning(*task_columns(raw_data))
    )


# -- bulk push (one queue, many tasks: storage/queues.py `push_many`) -------------------------------------
#
# The fair tags are computed in Python from what these read (the queue's clock and backlog, the heads of
# the batch's priorities, the queued twins of its hashes), then one insert and one update write the batch.


@cache
def queued_twins() -> Select[Any]:
    """The queue's queued tasks with one of `:hashes_` (a list): the tasks a push may reprioritise."""
    return select(*task_columns(), Task.fair_key).where(
        Task.scheduler_id == bindparam("queue_"),
        Task.hash.in_(bindparam("hashes_", expanding=True)),
        IS_QUEUED,
    )


@cache
def head_tags(priorities: int) -> Any:
    """(priority, head) for `:priority_0_` .. `:priority_{n-1}_` at `:type_`: one index probe each
    (a GROUP BY would read every queued task of those priorities)."""
    heads = [
        select(
            bindparam(f"priority_{n}_", type_=Task.priority.type).label("priority"),
            select(func.min(Task.fair_key))
            .where(IS_QUEUED, Task.type == bindparam("type_"), Task.priority == bindparam(f"priority_{n}_"))
            .scalar_subquery()
            .label("head"),
        )
        for n in range(priorities)
    ]
    return heads[0] if priorities == 1 else union_all(*heads)


@cache
def insert_tasks(dialect: Dialect) -> Any:
    """New tasks with their tags, run with one parameter set per task (SQLAlchemy sends them as
    multi-row VALUES). A row that hits any unique key (a twin queued meanwhile by another
    transaction, a task id taken) is skipped, not an error: the caller finds it missing from the answer."""
    insert = postgresql.insert(TASKS) if dialect == "postgresql" else sqlite.insert(TASKS)
    return insert.on_conflict_do_nothing().returning(*task_columns())


@cache
def reprioritise_tasks(count: int) -> Update:
    """Tasks `:id_0_` .. get `:priority_0_` ..; every one gets `modified_at` = `:now_`."""
    ids = [bindparam(f"id_{n}_", type_=Task.id.type) for n in range(count)]
    priority = case(
        *((Task.id == ids[n], bindparam(f"priority_{n}_", type_=Task.priority.type)) for n in range(count)),
        else_=Task.priority,
    )
    return (
        update(TASKS)
        .where(Task.id.in_(ids))
        .values(priority=priority, modified_at=bindparam("now_", type_=Task.modified_at.type))
        .returning(*task_columns())
    )


# -- status changes ------------------------------------------------------------------------------------


def change_status(requested: TaskStatus, raw_data: bool = False) -> Update:
    """Move one task (`:id_`) to `requested` if its current status allows it; no row: it does not
    (or the task does not exist; `task_status` tells which)."""
    # Literals, not parameters: the statement is compiled once per requested status.
    allowed: list[Any] = [literal_column(f"'{status.value}'") for status in sorted(may_precede(requested))]
    condition = Task.status.in_(allowed) if allowed else false()
    return (
        update(TASKS)
        .where(Task.id == bindparam("id_"), condition)
        .values(status=requested.value, modified_at=bindparam("now_", type_=Task.modified_at.type))
        .returning(*task_columns(raw_data))
    )


def task_status() -> Select[Any]:
    return select(Task.status).where(Task.id == bindparam("id_"))


@cache
def task_by_id(raw_data: bool = False) -> Select[Any]:
    """One task's row by its id (the unique index on `id`), as every statement returns a task."""
    return select(*task_columns(raw_data)).where(TASKS.c.id == bindparam("id_"))


def twin_is_queued(scheduler_id: str, task_hash: str) -> Select[Any]:
    return select(exists().where(Task.scheduler_id == scheduler_id, Task.hash == task_hash, IS_QUEUED))


# -- counts ------------------------------------------------------------------------------------------


def queue_counts(scheduler_id: str | None = None) -> Select[Any]:
    """Queued and in-flight tasks per queue, from the trigger-kept counters: no scan of `tasks`."""
    columns: list[Any] = [
        QueueCounter.scheduler_id,
        func.sum(QueueCounter.queued).label("queued"),
        func.sum(QueueCounter.in_flight).label("in_flight"),
    ]
    query = select(*columns).group_by(QueueCounter.scheduler_id)
    if scheduler_id is not None:
        query = query.where(QueueCounter.scheduler_id == scheduler_id)
    return query


def queue_exists() -> Select[Any]:
    return select(Scheduler.id).where(Scheduler.id == bindparam("queue_"))


def any_caps() -> Select[Any]:
    return select(exists().where(Organisation.max_in_flight.is_not(None)))


# -- compiling -------------------------------------------------------------------------------------------


def dialect_of(name: str) -> Any:
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import psycopg

        return psycopg.dialect()  # type: ignore[no-untyped-call]
    return sqlite.dialect()


def compiled_sql(statement: Any, dialect: Dialect) -> str:
    """The statement's SQL text for a dialect, bound parameters left as placeholders."""
    return str(statement.compile(dialect=dialect_of(dialect)))
