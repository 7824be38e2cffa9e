"""The priority queue: push (with dedup and maxsize), pop (concurrency-safe), task lifecycle.

Lower priority pops first; ties pop oldest first (by insertion sequence). On PostgreSQL a pop is one
`UPDATE ... WHERE seq IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`, so concurrent pops from any
number of processes never hand out the same task and never wait on each other. On SQLite writers are
serialised by `BEGIN IMMEDIATE` (see store.py), which gives the same guarantee inside one server.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, func, literal_column, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from baton.models import Scheduler, Task, TaskStatus, utcnow
from baton.store import ConflictError, NotFoundError, get_scheduler

QUEUED_WITH_HASH = "status = 'queued' AND hash IS NOT NULL"
# `status = 'queued'` written as a literal, not a bound parameter: only then can SQLite (and a
# PostgreSQL generic plan) prove the condition of the partial indexes and use them.
IS_QUEUED = Task.status == literal_column("'queued'")

# Which status a task may move to from each status, through the API.
ALLOWED_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.DISPATCHED, TaskStatus.CANCELLED}),
    TaskStatus.DISPATCHED: frozenset(
        {TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.RUNNING: frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED}),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


class QueueFullError(Exception):
    """The queue holds `maxsize` queued tasks already."""


class QueueDisabledError(ConflictError):
    """The queue's scheduler is disabled: it accepts no pushes."""


class InvalidTransitionError(ConflictError):
    def __init__(self, current: str, requested: str) -> None:
        super().__init__(f"task status cannot change from '{current}' to '{requested}'")
        self.current = current
        self.requested = requested


@dataclass(frozen=True)
class PushResult:
    task: Task
    created: bool


def _insert_for(session: Session) -> Any:
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def queue_is_full(session: Session, queue: Scheduler) -> bool:
    if queue.maxsize <= 0:
        return False
    # Count at most `maxsize` rows: bounded work however long the queue is.
    capped = select(Task.seq).where(Task.scheduler_id == queue.id, IS_QUEUED).limit(queue.maxsize).subquery()
    count = session.scalar(select(func.count()).select_from(capped)) or 0
    return count >= queue.maxsize


def _reprioritise_queued_duplicate(session: Session, scheduler_id: str, task_hash: str, priority: int) -> Task | None:
    stmt = (
        update(Task)
        .where(
            Task.scheduler_id == scheduler_id,
            Task.hash == task_hash,
            IS_QUEUED,
        )
        .values(priority=priority, modified_at=utcnow())
        .returning(Task)
        .execution_options(synchronize_session=False)
    )
    return session.scalars(stmt).one_or_none()


def push(
    session: Session,
    scheduler_id: str,
    *,
    priority: int,
    data: dict[str, Any],
    task_hash: str | None = None,
    schedule_id: str | None = None,
    task_id: uuid.UUID | None = None,
) -> PushResult:
    """Queue a task. A queued task with the same hash gets the new priority instead of a twin.

    `task_id` lets a client choose the id (OpenKAT's runners do); an id in use raises ConflictError.
    """
    queue = get_scheduler(session, scheduler_id)
    if not queue.enabled:
        raise QueueDisabledError(f"queue '{scheduler_id}' is disabled")
    if queue_is_full(session, queue):
        if task_hash is not None:
            existing = _reprioritise_queued_duplicate(session, scheduler_id, task_hash, priority)
            if existing is not None:
                return PushResult(existing, created=False)
        raise QueueFullError(f"queue '{scheduler_id}' is full (maxsize {queue.maxsize})")

    now = utcnow()
    new_id = task_id or uuid.uuid4()
    if task_id is not None and session.scalar(select(Task.seq).where(Task.id == task_id)) is not None:
        raise ConflictError(f"task '{task_id}' already exists")
    values = {
        "id": new_id,
        "scheduler_id": scheduler_id,
        "schedule_id": schedule_id,
        "organisation": queue.organisation,
        "type": queue.type,
        "priority": priority,
        "status": TaskStatus.QUEUED.value,
        "hash": task_hash,
        "data": data,
        "attempts": 0,
        "created_at": now,
        "modified_at": now,
    }
    stmt = _insert_for(session)(Task).values(**values)
    if task_hash is not None:
        # The partial unique index decides atomically: insert, or update the queued twin.
        stmt = stmt.on_conflict_do_update(
            index_elements=[Task.scheduler_id, Task.hash],
            index_where=text(QUEUED_WITH_HASH),
            set_={"priority": priority, "modified_at": now},
        )
    task = session.scalars(stmt.returning(Task)).one()
    return PushResult(task, created=task.id == new_id)


def pop(
    session: Session,
    *,
    scheduler_id: str | None = None,
    task_type: str | None = None,
    limit: int = 1,
    condition: ColumnElement[bool] | None = None,
) -> list[Task]:
    """Hand out up to `limit` queued tasks (now `dispatched`), best priority first."""
    candidates = select(Task.seq).where(IS_QUEUED)
    if scheduler_id is not None:
        candidates = candidates.where(Task.scheduler_id == scheduler_id)
    if task_type is not None:
        candidates = candidates.where(Task.type == task_type)
    if condition is not None:
        candidates = candidates.where(condition)
    candidates = candidates.order_by(Task.priority, Task.seq).limit(limit).with_for_update(skip_locked=True)
    if session.get_bind().dialect.name == "postgresql":
        # A materialised CTE runs the locking SELECT exactly once; as an `IN (subquery)` the planner
        # may re-run it per outer row and dispatch more than `limit` tasks.
        claimed = candidates.cte("claimed").prefix_with("MATERIALIZED")
        target = and_(Task.seq.in_(select(claimed.c.seq)), IS_QUEUED)
    else:
        # Writers are serialised here, so the sub-select's rows are still queued. No second status
        # test: with it, SQLite scans every queued row by status instead of looking up the rowids.
        target = Task.seq.in_(candidates.scalar_subquery())
    stmt = (
        update(Task)
        .where(target)
        .values(status=TaskStatus.DISPATCHED.value, modified_at=utcnow())
        .returning(Task)
        .execution_options(synchronize_session=False)
    )
    popped = list(session.scalars(stmt).all())
    popped.sort(key=lambda task: (task.priority, task.seq))
    return popped


def get_task(session: Session, task_id: uuid.UUID, *, for_update: bool = False) -> Task:
    query = select(Task).where(Task.id == task_id)
    if for_update:
        query = query.with_for_update()
    task = session.scalars(query).one_or_none()
    if task is None:
        raise NotFoundError(f"task '{task_id}' not found")
    return task


def change_status(session: Session, task_id: uuid.UUID, requested: TaskStatus) -> Task:
    """Move a task along its lifecycle; an illegal move raises InvalidTransitionError (409)."""
    task = get_task(session, task_id, for_update=True)
    current = TaskStatus(task.status)
    if requested not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransitionError(current.value, requested.value)
    task.status = requested.value
    task.modified_at = utcnow()
    return task


def list_tasks(
    session: Session,
    *,
    scheduler_id: str | None = None,
    status: TaskStatus | None = None,
    organisation: str | None = None,
    task_type: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[int, Sequence[Task]]:
    conditions: list[ColumnElement[bool]] = []
    if scheduler_id is not None:
        conditions.append(Task.scheduler_id == scheduler_id)
    if status is not None:
        conditions.append(Task.status == status.value)
    if organisation is not None:
        conditions.append(Task.organisation == organisation)
    if task_type is not None:
        conditions.append(Task.type == task_type)
    count = session.scalar(select(func.count()).select_from(Task).where(*conditions)) or 0
    rows = session.scalars(select(Task).where(*conditions).order_by(Task.seq.desc()).limit(limit).offset(offset)).all()
    return count, rows


def queue_sizes(session: Session) -> dict[str, int]:
    rows = session.execute(select(Task.scheduler_id, func.count()).where(IS_QUEUED).group_by(Task.scheduler_id)).all()
    return {scheduler_id: count for scheduler_id, count in rows}


def queue_size(session: Session, scheduler_id: str) -> int:
    return (
        session.scalar(select(func.count()).select_from(Task).where(Task.scheduler_id == scheduler_id, IS_QUEUED)) or 0
    )


def requeue_stuck(session: Session, *, older_than: datetime, max_attempts: int, limit: int = 500) -> tuple[int, int]:
    """Put dispatched/running tasks untouched since `older_than` back in their queue.

    A task that has used up `max_attempts` is marked failed instead. Rows are claimed with
    SKIP LOCKED, so concurrent replicas running this never recover the same task twice.
    Returns (requeued, failed).
    """
    stuck = session.scalars(
        select(Task)
        .where(
            Task.status.in_([TaskStatus.DISPATCHED.value, TaskStatus.RUNNING.value]),
            Task.modified_at < older_than,
        )
        .order_by(Task.modified_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    requeued = failed = 0
    now = utcnow()
    for task in stuck:
        task.attempts += 1
        task.modified_at = now
        if task.attempts >= max_attempts:
            task.status = TaskStatus.FAILED.value
            task.reason = f"no progress reported after {task.attempts} attempts (status timeout)"
            failed += 1
            continue
        twin = None
        if task.hash is not None:
            twin = session.scalars(
                select(Task.seq).where(
                    Task.scheduler_id == task.scheduler_id,
                    Task.hash == task.hash,
                    IS_QUEUED,
                )
            ).first()
        if twin is not None:  # the same work is already queued again: do not create a duplicate
            task.status = TaskStatus.CANCELLED.value
            task.reason = "stuck; superseded by an identical queued task"
            continue
        task.status = TaskStatus.QUEUED.value
        task.reason = f"re-queued after status timeout (attempt {task.attempts})"
        requeued += 1
    return requeued, failed
