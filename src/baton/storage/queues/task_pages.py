"""Lists of tasks, the one home for both kinds:

- the API's listing (`GET /tasks`, OpenKAT's shape): the tasks matching a `TaskQuery` (and a filter
  tree), newest first, by offset, with how many match in all; and their hourly counts by status;
- the status page's keyset pages (`seq < before`, newest first, `LIMIT n + 1` to know whether there
  is more): no count of the matching rows, ever.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, false, func, or_, select
from sqlalchemy.orm import Session

from baton.core.filters import Condition, FilterTree, Group
from baton.core.model import SchedulerType, scheduler_id_for
from baton.core.task_queries import TASK_TYPES, TaskFilter, TaskQuery
from baton.core.views import TaskRow as TaskRow
from baton.storage.engine import on_postgresql
from baton.storage.filters import compile_tree
from baton.storage.tables import Task

SCAN_WINDOW = 20_000  # SQLite: newest tasks walked by primary key before an index is used


# -- the API's listing -----------------------------------------------------------------------------------


def listing_conditions(query: TaskQuery, dialect: str) -> list[ColumnElement[bool]]:
    """The listing's filters as SQL (a contradictory range raises before any SQL is run)."""
    conditions: list[Any] = []
    if query.scheduler_id is not None:
        column = Task.type if query.scheduler_id in TASK_TYPES else Task.scheduler_id
        conditions.append(column == query.scheduler_id)
    if query.organisation is not None:
        conditions.append(Task.organisation == query.organisation)
    if query.status == "pending":
        conditions.append(false())
    elif query.status is not None:
        conditions.append(Task.status == query.status)
    if query.task_type is not None:
        conditions.append(Task.type == query.task_type.value)
    earliest, latest = query.created_between()
    if earliest is not None:
        conditions.append(Task.created_at >= earliest)
    if latest is not None:
        conditions.append(Task.created_at <= latest)
    if query.input_ooi is not None:
        conditions.append(compile_tree(Condition("data", ("input_ooi",), "eq", query.input_ooi), dialect))
    if query.plugin_id is not None:
        either = Group(
            "or",
            (
                Condition("data", ("boefje", "id"), "eq", query.plugin_id),
                Condition("data", ("normalizer", "id"), "eq", query.plugin_id),
            ),
        )
        conditions.append(compile_tree(either, dialect))
    return conditions


def filter_condition(tree: FilterTree, dialect: str) -> ColumnElement[bool]:
    """A filter in the pop filter language (`baton.core.filters`) as a listing's condition."""
    return compile_tree(tree, dialect)


def list_tasks(
    session: Session,
    *,
    conditions: Sequence[ColumnElement[bool]] = (),
    limit: int = 100,
    offset: int = 0,
    newest_first: bool = True,
) -> tuple[int, Sequence[Task]]:
    """A page of tasks matching every condition, and how many match in all."""
    count = session.scalar(select(func.count()).select_from(Task).where(*conditions)) or 0
    order = Task.seq.desc() if newest_first else Task.seq
    rows = session.scalars(select(Task).where(*conditions).order_by(order).limit(limit).offset(offset)).all()
    return count, rows


def hourly_counts(
    session: Session, since: datetime, conditions: Sequence[ColumnElement[bool]] = ()
) -> list[tuple[datetime, str, int]]:
    """(hour, status, tasks) for tasks last modified since `since`, counted by the database."""
    if on_postgresql(session):
        hour: Any = func.date_trunc("hour", Task.modified_at)
    else:
        hour = func.strftime("%Y-%m-%d %H:00:00", Task.modified_at)
    rows = session.execute(
        select(hour.label("hour"), Task.status, func.count())
        .where(Task.modified_at >= since, *conditions)
        .group_by(hour, Task.status)
    ).all()
    counts = []
    for bucket, status, number in rows:
        moment = bucket if isinstance(bucket, datetime) else datetime.fromisoformat(bucket)
        counts.append((moment if moment.tzinfo else moment.replace(tzinfo=UTC), status, int(number)))
    return counts


# -- the status page's keyset pages ----------------------------------------------------------------------


ROW_COLUMNS = [
    Task.seq,
    Task.id,
    Task.scheduler_id,
    Task.organisation,
    Task.type,
    Task.priority,
    Task.status,
    Task.hash,
    Task.attempts,
    Task.reason,
    Task.created_at,
    Task.modified_at,
]


def page_row(task: Task) -> TaskRow:
    return TaskRow(**{column.key: getattr(task, column.key) for column in ROW_COLUMNS})


def parse_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def page_conditions(wanted: TaskFilter, all_queue_ids: Sequence[str], indexed: bool = True) -> list[Any]:
    """The filter as SQL. `indexed=False` writes status and type so that no index can serve them
    (`status || ''`): SQLite then walks the primary key, which is what a common status needs."""

    def equal(column: Any, value: str) -> Any:
        return (column if indexed else column.concat("")) == value

    conditions: list[Any] = []
    queues: list[str] | None = None
    if wanted.organisation is not None:
        kinds = [wanted.type] if wanted.type is not None else list(SchedulerType)
        queues = [scheduler_id_for(kind, wanted.organisation) for kind in kinds]
        conditions.append(Task.scheduler_id == queues[0] if len(queues) == 1 else Task.scheduler_id.in_(queues))
    elif wanted.type is not None:
        conditions.append(equal(Task.type, wanted.type.value))
    if wanted.status is not None:
        conditions.append(equal(Task.status, wanted.status.value))
    if wanted.q:
        hashed = Task.scheduler_id.in_(queues if queues is not None else list(all_queue_ids)) & (Task.hash == wanted.q)
        task_id = parse_uuid(wanted.q)
        conditions.append(or_(Task.id == task_id, hashed) if task_id is not None else hashed)
    return conditions


def newest_keys(session: Session, conditions: Sequence[Any], limit: int) -> list[int]:
    query = select(Task.seq).where(*conditions).order_by(Task.seq.desc()).limit(limit)
    return list(session.scalars(query))


def task_page(
    session: Session, wanted: TaskFilter, all_queue_ids: Sequence[str], before: int | None, limit: int
) -> list[TaskRow]:
    """`limit` + 1 tasks matching `wanted`, newest first (keyset on `seq`): the extra row only says
    that there is more. Keys first, rows after: a sort, where the plan needs one, runs over index
    entries, and only the page's rows are read. A queue (organisation, type) walks
    `ix_tasks_scheduler_status`, a hash `ix_tasks_scheduler_hash`, an id the unique index on `id`.

    SQLite keeps no statistics, so for a status or type alone it would take the status index and sort
    every task of that status (a million queued tasks: most of a second). There the newest
    `SCAN_WINDOW` tasks are walked by primary key first (a common status fills the page there); only
    a status too rare to do so needs the index beyond that window, and sorts its few tasks.
    """
    window = (
        session.get_bind().dialect.name == "sqlite"
        and wanted.organisation is None
        and not wanted.q
        and (wanted.status is not None or wanted.type is not None)
    )
    if not window:
        below = [Task.seq < before] if before is not None else []
        keys = newest_keys(session, [*page_conditions(wanted, all_queue_ids), *below], limit + 1)
    else:
        top = before if before is not None else (session.scalar(select(func.max(Task.seq))) or 0) + 1
        floor = top - SCAN_WINDOW
        recent = [Task.seq < top, Task.seq >= floor]
        keys = newest_keys(session, [*page_conditions(wanted, all_queue_ids, indexed=False), *recent], limit + 1)
        if len(keys) <= limit:
            older = [*page_conditions(wanted, all_queue_ids), Task.seq < floor]
            keys += newest_keys(session, older, limit + 1 - len(keys))
    if not keys:
        return []
    rows = session.execute(select(*ROW_COLUMNS).where(Task.seq.in_(keys)).order_by(Task.seq.desc()))
    return [TaskRow(**row._mapping) for row in rows]
