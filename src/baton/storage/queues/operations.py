"""Queue operations on a SQLAlchemy session or connection: what the statements mean as results.

The same functions serve a scheduler pushing inside its ingest transaction, the API's queue door on
SQLite (and for what it sends in a transaction), and tests; the door sends the same statements on
psycopg's async pool for the API on PostgreSQL (queue_door.py). A push is `push.py` (one task) or
`batch_push.py` (many tasks of one queue), both named here too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Update, func, select
from sqlalchemy.exc import IntegrityError

from baton.core.errors import ConflictError, DuplicateTaskError, NotFoundError
from baton.core.lifecycle import check_transition
from baton.core.model import TaskStatus
from baton.core.queueing import PopShape, PopTarget
from baton.core.queueing import PushRequest as PushRequest
from baton.core.queueing import PushResult as PushResult
from baton.storage.engine import on_postgresql
from baton.storage.queues import statements
from baton.storage.queues.batch_push import push_many as push_many
from baton.storage.queues.pops import PopStatement, build_pop
from baton.storage.queues.push import Executable, as_dict
from baton.storage.queues.push import push as push
from baton.storage.tables import IS_QUEUED, Task


def cannot_requeue(task_id: uuid.UUID) -> DuplicateTaskError:
    """A task handed back to `queued` while a task with its hash is queued already."""
    return DuplicateTaskError(f"task '{task_id}' cannot be queued again: a task with its hash is queued already")


def pop(
    executable: Executable,
    target: PopTarget,
    *,
    limit: int,
    now: datetime,
    condition: ColumnElement[bool] | None = None,
    caps: bool = False,
    raw_data: bool = False,
    receipt: uuid.UUID | None = None,
    together: bool = False,
) -> list[dict[str, Any]]:
    """Hand out up to `limit` tasks, best first; each task to one caller only, whatever the number of
    concurrent callers (PostgreSQL: SKIP LOCKED; SQLite: writers are serialised). The tasks carry
    `receipt` (a fresh one if None): the id of this pop (core/receipts.py). `together`: a boefje pop
    that hands out the head task's deduplication group (pops.py)."""
    dialect: statements.Dialect = "postgresql" if on_postgresql(executable) else "sqlite"
    shape = PopShape(together=together, by_queue=target.queue is not None, fair=target.fair, caps=caps)
    if condition is None:
        statement = PopStatement(shape, raw_data).build(dialect)
    else:
        statement = build_pop(shape, dialect, condition, raw_data)
    return run_pop(executable, statement, target, limit=limit, now=now, receipt=receipt)


def run_pop(
    executable: Executable,
    statement: Update,
    target: PopTarget,
    *,
    limit: int,
    now: datetime,
    receipt: uuid.UUID | None = None,
) -> list[dict[str, Any]]:
    """Run a pop statement (pops.py) built for `target`'s kind."""
    params = {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now, "receipt_": receipt}
    if receipt is None:
        params["receipt_"] = uuid.uuid4()
    rows = [as_dict(row) for row in executable.execute(statement, params)]
    return sort_popped(rows, target)


def sort_popped(rows: Sequence[dict[str, Any]], target: PopTarget) -> list[dict[str, Any]]:
    """RETURNING comes in no particular order: put a batch back in hand-out order."""
    if target.type is not None and target.fair:
        return sorted(rows, key=lambda row: (row["priority"], row["fair_key"], row["seq"]))
    return sorted(rows, key=lambda row: (row["priority"], row["seq"]))


def change_status(
    executable: Executable, task_id: uuid.UUID, requested: TaskStatus, now: datetime, raw_data: bool = False
) -> dict[str, Any]:
    """Move a task along its lifecycle; an illegal move raises InvalidTransitionError (409)."""
    try:
        row = executable.execute(statements.change_status(requested, raw_data), {"id_": task_id, "now_": now}).first()
    except IntegrityError as exc:  # back to queued while a task with its hash is queued already
        raise cannot_requeue(task_id) from exc
    if row is not None:
        return as_dict(row)
    current = executable.execute(statements.task_status(), {"id_": task_id}).scalar()
    if current is None:
        raise unknown_task(task_id)
    check_transition(TaskStatus(current), requested)
    # Allowed now, refused a moment ago: another client moved the task in between.
    raise ConflictError(f"task '{task_id}' changed while being updated (now '{current}'); retry")


def unknown_task(task_id: uuid.UUID) -> NotFoundError:
    return NotFoundError(f"task '{task_id}' not found")


def task_record(executable: Executable, task_id: uuid.UUID, raw_data: bool = False) -> dict[str, Any]:
    """One task as a record; NotFoundError (404) when there is none."""
    row = executable.execute(statements.task_by_id(raw_data), {"id_": task_id}).first()
    if row is None:
        raise unknown_task(task_id)
    return as_dict(row)


def queue_counts(executable: Executable, scheduler_id: str | None = None) -> dict[str, tuple[int, int]]:
    """(queued, in flight) per queue id, from the counters (no scan of the tasks)."""
    rows = executable.execute(statements.queue_counts(scheduler_id))
    return {row.scheduler_id: (int(row.queued or 0), int(row.in_flight or 0)) for row in rows}


def recount(executable: Executable, scheduler_id: str) -> tuple[int, int]:
    """Count a queue the slow way (tests compare it with the counters)."""
    queued = executable.execute(
        select(func.count()).select_from(Task).where(Task.scheduler_id == scheduler_id, IS_QUEUED)
    ).scalar_one()
    in_flight = executable.execute(
        select(func.count())
        .select_from(Task)
        .where(Task.scheduler_id == scheduler_id, Task.status.in_(["dispatched", "running"]))
    ).scalar_one()
    return int(queued), int(in_flight)
