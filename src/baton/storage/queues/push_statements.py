"""The push's statements: one task (PostgreSQL: one statement, with its rescan schedule for a boefje task
pushed from outside; SQLite: a short transaction of a few), and many tasks of one queue (batch_push.py).

The fair-queuing tag each push gives its task: a pop across organisations (by type) takes ties of
priority by it when fairness is on (pops.py):

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

from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    String,
    Text,
    Update,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from baton.core.admission import OnDuplicate
from baton.core.fairness import FAIR_UNIT
from baton.core.model import SchedulerType, TaskStatus
from baton.core.rescans import OBJECT_REASONS

# Statements are Core (table-level), not ORM: results are plain rows, no identity map to keep in step.
# Bound parameters end in `_`: a parameter named like a column would also be SET by a Core UPDATE.
from baton.storage.queues.statements import BOEFJE_RUNS, SCHEDULES, TASKS, Dialect, task_columns
from baton.storage.tables import (
    IS_QUEUED,
    QUEUED_WITH_HASH,
    BoefjeRun,
    Organisation,
    QueueCounter,
    Schedule,
    Scheduler,
    Task,
)

# -- push --------------------------------------------------------------------------------------------


def _queue_row(with_head: bool = False) -> Select[Any]:
    """The queue a push names: its settings, its organisation's weight and its counts; `with_head`: and the
    head tag at the push's type and priority (`:priority_`), read once for the new task's tag."""
    counters = (
        select(
            func.coalesce(func.sum(QueueCounter.queued), 0).label("queued"),
            func.coalesce(func.max(QueueCounter.last_key), 0).label("last_key"),
        )
        .where(QueueCounter.scheduler_id == bindparam("queue_"))
        .subquery("counts")
    )
    columns: list[Any] = [
        Scheduler.id,
        Scheduler.organisation,
        Scheduler.type,
        Scheduler.maxsize,
        # A retired organisation's queues take no task, as a disabled queue (storage/control/organisation_sync.py).
        and_(Scheduler.enabled, Organisation.retired_at.is_(None)).label("enabled"),
        Organisation.weight,
        counters.c.queued,
        counters.c.last_key,
    ]
    if with_head:
        columns.append(func.coalesce(_head_tag(Scheduler.type), 0).label("head"))
    return (
        select(*columns)
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
    The SQL twin of `baton.core.fairness.fair_tag` (which the batched push uses): change both. `queue`
    is `_queue_row(with_head=True)`."""
    # `op("/")`: integer division on both backends (SQLAlchemy's `/` would cast to NUMERIC).
    step = literal_column(str(FAIR_UNIT)).op("/")(queue.c.weight)
    backlog = cast(queue.c.queued, BigInteger)
    return greatest(least(queue.c.last_key + step, queue.c.head + backlog * step), queue.c.head)


def _insert_values(queue: Any, tag: Any, schedule_id: Any = None) -> Select[Any]:
    return select(
        bindparam("id_", type_=Task.id.type),
        queue.c.id,
        bindparam("schedule_id_", type_=Task.schedule_id.type) if schedule_id is None else schedule_id,
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
def push_postgresql(
    on_duplicate: OnDuplicate = "reprioritise", raw_data: bool = False, scheduled: bool = False
) -> Select[Any]:
    """Push as one PostgreSQL statement: dedup, maxsize, fair tag and insert in one round trip.

    Parameters: `:queue_`, `:id_`, `:schedule_id_`, `:priority_`, `:hash_`, `:data_`, `:now_`. The answer is
    one row (none: unknown queue) with the queue's `enabled`, `maxsize` and `queued`, and the task
    with `outcome` 'created' or 'updated' (a queued twin with this hash got the new priority) or
    'duplicate' (`refuse`: the twin is left alone), or no task (disabled or full).

    `scheduled`: a boefje task with its rescan schedule, in the same statement (`scheduled_push`).

    The conditions are the admission rule's (`baton.core.admission`) in SQL: the push reads this
    answer through `admit`, and an integration test checks that the two agree for every case.
    """
    queue = _queue_row(with_head=True).cte("queue")
    open_queue = select(queue.c.id).where(queue.c.enabled).exists()
    twin_match = and_(
        Task.scheduler_id == bindparam("queue_"),
        Task.hash == bindparam("hash_"),
        IS_QUEUED,
        open_queue,
    )
    room = (queue.c.maxsize == 0) | (queue.c.queued < queue.c.maxsize)
    schedule_id: Any = bindparam("schedule_id_", type_=Task.schedule_id.type)
    if scheduled:  # the admission rule again: a duplicate is refused, or reprioritises its twin
        twin_queued = exists().where(twin_match)
        if on_duplicate == "refuse":
            admitted = and_(queue.c.enabled, room, ~twin_queued)
        else:
            admitted = and_(queue.c.enabled, or_(room, twin_queued))
        sched = _kept_schedule(queue, admitted)
        schedule_id = func.coalesce(select(cast(sched.c.id, Text)).scalar_subquery(), schedule_id)
    twin_values: dict[str, Any] = {
        "priority": bindparam("priority_"),
        "modified_at": bindparam("now_", type_=Task.modified_at.type),
    }
    if scheduled:
        twin_values["schedule_id"] = schedule_id
    if on_duplicate == "reprioritise":
        twin = (
            update(TASKS)
            .where(twin_match)
            .values(**twin_values)
            .returning(*task_columns(raw_data), literal("updated").label("outcome"))
            .cte("twin")
        )
    else:
        twin = select(*task_columns(raw_data), literal("duplicate").label("outcome")).where(twin_match).cte("twin")
    tag = _new_tag(queue, func.greatest, func.least)
    values = _insert_values(queue, tag, schedule_id).where(queue.c.enabled, room, ~select(twin.c.id).exists())
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
    task = union_all(select(twin), select(inserted)).cte("task")
    answer = select(queue.c.enabled, queue.c.maxsize, queue.c.queued, task).select_from(queue.outerjoin(task, true()))
    if scheduled:
        answer = answer.add_cte(_recorded_run(queue, task))  # rendered though nothing reads it
    return answer


def _kept_schedule(queue: Any, admitted: ColumnElement[bool]) -> Any:
    """The schedule of a boefje task pushed from outside (rocky's manual run), created or refreshed: the
    job (`:shash_`, `:sdata_`), its cron (`:scron_`) and next deadline (`:sdeadline_`), its new id
    `:sid_`. One the rescans disabled for a reason is enabled again (a new task for its object proves the
    reason gone); one disabled by hand stays disabled. Written only for a push the queue admits."""
    # Literals, not an expanding parameter: the statement is compiled once, for psycopg.
    reenable = Schedule.disabled_reason.in_([literal_column(f"'{reason}'") for reason in sorted(OBJECT_REASONS)])
    values = select(
        bindparam("sid_", type_=Schedule.id.type),
        literal(SchedulerType.BOEFJE.value),
        queue.c.organisation,
        bindparam("shash_", type_=Schedule.hash.type),
        bindparam("sdata_", type_=Schedule.data.type),
        true(),
        bindparam("scron_", type_=Schedule.schedule.type),
        bindparam("sdeadline_", type_=Schedule.deadline_at.type),
        bindparam("now_", type_=Schedule.last_run_at.type),
        bindparam("now_", type_=Schedule.created_at.type),
        bindparam("now_", type_=Schedule.modified_at.type),
    ).where(admitted)
    columns = ["id", "scheduler_id", "organisation", "hash", "data", "enabled", "schedule", "deadline_at"]
    insert = postgresql.insert(SCHEDULES).from_select([*columns, "last_run_at", "created_at", "modified_at"], values)
    return (
        insert.on_conflict_do_update(
            index_elements=[Schedule.hash],
            set_={
                "data": insert.excluded.data,
                "schedule": insert.excluded.schedule,
                "deadline_at": insert.excluded.deadline_at,
                "last_run_at": insert.excluded.last_run_at,
                "modified_at": insert.excluded.modified_at,
                "enabled": case((reenable, true()), else_=Schedule.enabled),
                "disabled_reason": case((reenable, None), else_=Schedule.disabled_reason),
                "disabled_detail": case((reenable, None), else_=Schedule.disabled_detail),
            },
            where=Schedule.scheduler_id == SchedulerType.BOEFJE.value,
        )
        .returning(Schedule.id)
        .cte("sched")
    )


def _recorded_run(queue: Any, task: Any) -> Any:
    """The boefje run of a pushed task (`:rboefje_` on `:robject_`; none when either is NULL), recorded
    now whatever its last run, so an event within the grace period does not queue it again."""
    values = (
        select(
            queue.c.organisation,
            bindparam("rboefje_", type_=String()),
            bindparam("robject_", type_=String()),
            bindparam("now_", type_=BoefjeRun.queued_at.type),
        )
        .select_from(task)
        .where(
            task.c.outcome != literal_column("'duplicate'"),
            bindparam("rboefje_", type_=String()).is_not(None),
            bindparam("robject_", type_=String()).is_not(None),
        )
        .limit(1)
    )
    insert = postgresql.insert(BOEFJE_RUNS).from_select(
        ["organisation", "boefje_id", "object_key", "queued_at"], values
    )
    return (
        insert.on_conflict_do_update(
            index_elements=[BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key],
            set_={"queued_at": insert.excluded.queued_at},
        )
        .returning(BoefjeRun.boefje_id)
        .cte("run")
    )


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
    queue = _queue_row(with_head=True).subquery("queue")
    tag = _new_tag(queue, func.max, func.min)  # SQLite's two-argument max() and min(): greatest(), least()
    values = _insert_values(queue, tag)
    return (
        sqlite.insert(TASKS)
        .from_select([column.key for column in INSERTED_COLUMNS], values)
        .returning(*task_columns(raw_data))
    )


# -- bulk push (one queue, many tasks: storage/queues/operations.py `push_many`) -------------------------------------
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
