"""Queue operations on a SQLAlchemy session or connection: what the statements mean as results.

The same functions serve a scheduler pushing inside its ingest transaction, the SQLite executor of
the API, and tests. `executors.py` runs the same statements on psycopg's async pool for the API on
PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.errors import (
    ConflictError,
    DuplicateTaskError,
    NotFoundError,
    QueueDisabledError,
    QueueFullError,
)
from baton.core.lifecycle import check_transition
from baton.core.model import TaskStatus
from baton.storage import statements
from baton.storage.engine import on_postgresql
from baton.storage.statements import OnDuplicate, PopTarget
from baton.storage.tables import IS_QUEUED, Task

Outcome = Literal["created", "updated", "duplicate"]
Executable = Session | Connection


@dataclass(frozen=True)
class PushRequest:
    queue: str
    priority: int
    data: dict[str, Any]
    hash: str | None = None
    schedule_id: str | None = None
    task_id: uuid.UUID | None = None
    # `reprioritise`: a queued task with this hash gets the new priority (Baton's rule);
    # `refuse`: it is left alone and the push is a duplicate (OpenKAT's rule).
    on_duplicate: OnDuplicate = "reprioritise"

    def params(self, now: datetime, data: Any = None) -> dict[str, Any]:
        return {
            "queue_": self.queue,
            "id_": self.task_id or uuid.uuid4(),
            "schedule_id_": self.schedule_id,
            "priority_": self.priority,
            "hash_": self.hash,
            "data_": self.data if data is None else data,
            "now_": now,
        }


@dataclass(frozen=True)
class PushResult:
    outcome: Outcome
    task: dict[str, Any]

    @property
    def created(self) -> bool:
        return self.outcome == "created"


def _mapping(row: Any) -> dict[str, Any]:
    return dict(row._mapping)


def id_conflict(exc: Exception, request: PushRequest) -> ConflictError:
    return ConflictError(f"task '{request.task_id}' already exists")


def twin_queued(task_id: uuid.UUID) -> DuplicateTaskError:
    return DuplicateTaskError(f"task '{task_id}' cannot be queued again: a task with its hash is queued already")


def push_result(row: Any, request: PushRequest) -> PushResult:
    """Read the one-statement push's answer (PostgreSQL): see `statements.push_postgresql`."""
    if row is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    mapping = dict(row if isinstance(row, dict) else row._mapping)
    if mapping["id"] is None:
        if not mapping["enabled"]:
            raise QueueDisabledError(f"queue '{request.queue}' is disabled")
        raise QueueFullError(f"queue '{request.queue}' is full (maxsize {mapping['maxsize']})")
    outcome = mapping.pop("outcome")
    for key in ("enabled", "maxsize", "queued"):
        mapping.pop(key)
    if outcome == "duplicate":
        raise DuplicateTaskError(f"a task with hash '{request.hash}' is already queued in '{request.queue}'")
    return PushResult(outcome, mapping)


def push(executable: Executable, request: PushRequest, now: datetime, raw_data: bool = False) -> PushResult:
    """Queue a task: dedup by hash, maxsize, the fair tag, in the caller's transaction."""
    params = request.params(now)
    try:
        if on_postgresql(executable):
            row = executable.execute(statements.push_postgresql(request.on_duplicate, raw_data), params).first()
            return push_result(row, request)
        return _push_sqlite(executable, request, params, raw_data)
    except IntegrityError as exc:  # the only unique key a push can hit unhandled is a chosen task id
        raise id_conflict(exc, request) from exc


def _push_sqlite(executable: Executable, request: PushRequest, params: dict[str, Any], raw: bool) -> PushResult:
    queue = executable.execute(statements.queue_for_push(), params).first()
    if queue is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    if not queue.enabled:
        raise QueueDisabledError(f"queue '{request.queue}' is disabled")
    if request.hash is not None:
        if request.on_duplicate == "reprioritise":
            twin = executable.execute(statements.reprioritise_twin(raw), params).first()
            if twin is not None:
                return PushResult("updated", _mapping(twin))
        elif executable.execute(statements.queued_twin(raw), params).first() is not None:
            raise DuplicateTaskError(f"a task with hash '{request.hash}' is already queued in '{request.queue}'")
    if queue.maxsize > 0 and queue.queued >= queue.maxsize:
        raise QueueFullError(f"queue '{request.queue}' is full (maxsize {queue.maxsize})")
    row = executable.execute(statements.insert_task(raw), params).one()
    return PushResult("created", _mapping(row))


def push_many(executable: Executable, requests: Sequence[PushRequest], now: datetime) -> list[PushResult]:
    """Queue the tasks of one queue exactly as if pushed one after another in this order (dedup by
    hash, maxsize, the fair tag), in the caller's transaction; one result per request, in order. An
    error leaves the earlier pushes to the caller's rollback.

    One statement per task: a single statement for the batch could not give every task the fair tag
    that pushing it alone gives (each tag depends on the queue's clock, backlog and head as the
    previous pushes left them), and fairness is worth more than the round trips.
    """
    if not requests:
        return []
    if len({request.queue for request in requests}) != 1 or any(r.on_duplicate != "reprioritise" for r in requests):
        raise ValueError("push_many takes requests for one queue, with the 'reprioritise' rule")
    requests = [request if request.task_id else replace(request, task_id=uuid.uuid4()) for request in requests]
    return [push(executable, request, now) for request in requests]


def pop(
    executable: Executable,
    target: PopTarget,
    *,
    limit: int,
    now: datetime,
    condition: ColumnElement[bool] | None = None,
    caps: bool = False,
    raw_data: bool = False,
) -> list[dict[str, Any]]:
    """Hand out up to `limit` tasks, best first; each task to one caller only, whatever the number of
    concurrent callers (PostgreSQL: SKIP LOCKED; SQLite: writers are serialised)."""
    dialect: statements.Dialect = "postgresql" if on_postgresql(executable) else "sqlite"
    statement = statements.pop(target, dialect, condition=condition, caps=caps, raw_data=raw_data)
    params = {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now}
    rows = [_mapping(row) for row in executable.execute(statement, params)]
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
        raise twin_queued(task_id) from exc
    if row is not None:
        return _mapping(row)
    current = executable.execute(statements.task_status(), {"id_": task_id}).scalar()
    if current is None:
        raise NotFoundError(f"task '{task_id}' not found")
    check_transition(TaskStatus(current), requested)
    # Allowed now, refused a moment ago: another client moved the task in between.
    raise ConflictError(f"task '{task_id}' changed while being updated (now '{current}'); retry")


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
