"""The queue operations as the tests call them: one function per operation on a session, results with
attribute access. `queue_size` also checks the trigger-kept counters against a real count."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from baton.core.errors import InvalidTransitionError, QueueFullError
from baton.core.model import SchedulerType, TaskStatus, utcnow
from baton.core.queueing import PopTarget, PushRequest
from baton.storage.queues import operations as queues
from baton.storage.queues import task_pages
from baton.storage.queues import task_rows as tasks
from baton.storage.tables import Task

__all__ = [
    "InvalidTransitionError",
    "QueueFullError",
    "change_status",
    "get_task",
    "list_tasks",
    "pop",
    "push",
    "queue_size",
]
recover_stuck = tasks.recover_stuck
get_task = tasks.get_task


def _task(record: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(**record)


def push(
    session: Session,
    scheduler_id: str,
    *,
    priority: int,
    data: dict[str, Any],
    task_hash: str | None = None,
    schedule_id: str | None = None,
    task_id: uuid.UUID | None = None,
) -> SimpleNamespace:
    request = PushRequest(
        queue=scheduler_id, priority=priority, data=data, hash=task_hash, schedule_id=schedule_id, task_id=task_id
    )
    result = queues.push(session, request, utcnow())
    return SimpleNamespace(task=_task(result.task), created=result.created)


def pop(
    session: Session,
    *,
    scheduler_id: str | None = None,
    task_type: str | None = None,
    limit: int = 1,
    condition: ColumnElement[bool] | None = None,
    fair: bool = True,
) -> list[SimpleNamespace]:
    target = PopTarget(queue=scheduler_id) if scheduler_id is not None else PopTarget(type=task_type, fair=fair)
    return [_task(row) for row in queues.pop(session, target, limit=limit, now=utcnow(), condition=condition)]


def change_status(session: Session, task_id: uuid.UUID, status: TaskStatus) -> SimpleNamespace:
    return _task(queues.change_status(session, task_id, status, utcnow()))


def list_tasks(
    session: Session,
    *,
    scheduler_id: str | None = None,
    status: TaskStatus | None = None,
    organisation: str | None = None,
    task_type: SchedulerType | str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[int, Sequence[Task]]:
    conditions = []
    if scheduler_id is not None:
        conditions.append(Task.scheduler_id == scheduler_id)
    if status is not None:
        conditions.append(Task.status == status.value)
    if organisation is not None:
        conditions.append(Task.organisation == organisation)
    if task_type is not None:
        conditions.append(Task.type == str(task_type))
    return task_pages.list_tasks(session, conditions=conditions, limit=limit, offset=offset)


def queue_size(session: Session, scheduler_id: str) -> int:
    counted = queues.recount(session, scheduler_id)
    kept = queues.queue_counts(session, scheduler_id).get(scheduler_id, (0, 0))
    assert kept == counted, f"counters {kept} disagree with a real count {counted} for {scheduler_id}"
    return counted[0]
