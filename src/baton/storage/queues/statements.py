"""Named statements of a queue besides its pops (pops.py), built once with SQLAlchemy Core: push, status
changes, one task, counts.

`push` and `change_status` are on the hot path with the pop. Each is one statement on PostgreSQL (one
round trip, safe in autocommit) and a short transaction of a few statements on SQLite, whose writers
are serialised anyway. They are compiled once per variant and sent by whoever runs them (the API's
queue door, queue_door.py; or the caller's own session when a scheduler pushes inside its ingest
transaction).
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from sqlalchemy import (
    Select,
    Table,
    Text,
    Update,
    bindparam,
    cast,
    exists,
    false,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import sqlite

from baton.core.lifecycle import may_precede
from baton.core.model import TaskStatus
from baton.core.queueing import TASK_FIELDS
from baton.storage.tables import (
    IS_QUEUED,
    BoefjeRun,
    Organisation,
    Plugin,
    QueueCounter,
    Schedule,
    Scheduler,
    Task,
)

# Statements are Core (table-level), not ORM: results are plain rows, no identity map to keep in step.
# Bound parameters end in `_`: a parameter named like a column would also be SET by a Core UPDATE.
TASKS: Table = Task.__table__  # type: ignore[assignment]
SCHEDULES: Table = Schedule.__table__  # type: ignore[assignment]
BOEFJE_RUNS: Table = BoefjeRun.__table__  # type: ignore[assignment]
Dialect = Literal["postgresql", "sqlite"]


def task_columns(raw_data: bool = False) -> list[Any]:
    """What every statement returns about a task. `raw_data`: `data` as JSON text, not parsed, for
    answers that pass it through to the client untouched."""
    data: Any = cast(TASKS.c.data, Text).label("data") if raw_data else TASKS.c.data
    return [data if name == "data" else TASKS.c[name] for name in TASK_FIELDS]


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


def plugin_timings() -> Any:
    """The plugins with a timing of their own (a cron, or minutes between runs)."""
    return select(Plugin.id, Plugin.cron, Plugin.interval).where(
        or_(Plugin.cron.is_not(None), Plugin.interval.is_not(None))
    )


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
