"""Reading one task, and recovering the ones whose runner went silent. Lists of tasks: `task_pages.py`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from baton.core.model import TaskStatus, utcnow
from baton.core.queueing import TASK_FIELDS
from baton.storage import statements
from baton.storage.queues import unknown_task
from baton.storage.tables import Task


def find_task(session: Session, task_id: uuid.UUID) -> Task | None:
    return session.scalars(select(Task).where(Task.id == task_id)).one_or_none()


def get_task(session: Session, task_id: uuid.UUID) -> Task:
    task = find_task(session, task_id)
    if task is None:
        raise unknown_task(task_id)
    return task


def record(task: Task) -> dict[str, Any]:
    return {column: getattr(task, column) for column in TASK_FIELDS}


def requeue_stuck(session: Session, *, older_than: datetime, max_attempts: int, limit: int = 500) -> tuple[int, int]:
    """Put dispatched/running tasks untouched since `older_than` back in their queue.

    A task that has used up `max_attempts` is marked failed instead; one whose twin (same hash) is
    queued again is cancelled rather than duplicated. Returns (requeued, failed).
    """
    requeued = failed = 0
    now = utcnow()
    for task in session.scalars(stuck_tasks(older_than, limit)).all():
        task.attempts += 1
        task.modified_at = now
        if task.attempts >= max_attempts:
            task.status = TaskStatus.FAILED.value
            task.reason = f"no progress reported after {task.attempts} attempts (status timeout)"
            failed += 1
            continue
        if task.hash is not None and session.scalar(statements.twin_is_queued(task.scheduler_id, task.hash)):
            task.status = TaskStatus.CANCELLED.value
            task.reason = "stuck; superseded by an identical queued task"
            continue
        task.status = TaskStatus.QUEUED.value
        task.reason = f"re-queued after status timeout (attempt {task.attempts})"
        requeued += 1
    return requeued, failed


def stuck_tasks(older_than: datetime, limit: int) -> Select[Any]:
    """Dispatched or running tasks untouched since `older_than`, claimed with SKIP LOCKED so two
    recoverers never take the same one."""
    return (
        select(Task)
        .where(
            Task.status.in_([TaskStatus.DISPATCHED.value, TaskStatus.RUNNING.value]),
            Task.modified_at < older_than,
        )
        .order_by(Task.modified_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
