"""The statements of an operator's actions on one task (`baton.service.operator` decides them):
requeue it, change its priority."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.admission import twin_queued
from baton.core.model import TaskStatus
from baton.core.views import RequeueState as RequeueState
from baton.storage.control.scheduler_rows import get_scheduler
from baton.storage.queues.operations import queue_counts
from baton.storage.queues.statements import TASKS
from baton.storage.tables import IS_QUEUED, Organisation, Task


def requeue_state(session: Session, task_id: uuid.UUID) -> RequeueState | None:
    """None: no such task."""
    current = session.execute(
        select(Task.status, Task.scheduler_id, Task.hash).where(Task.id == task_id).with_for_update()
    ).first()
    if current is None:
        return None
    status, queue_id, task_hash = current
    queue = get_scheduler(session, queue_id)
    retired = session.scalar(select(Organisation.retired_at).where(Organisation.id == queue.organisation))
    twin = task_hash is not None and session.scalar(
        select(Task.id).where(Task.scheduler_id == queue_id, Task.hash == task_hash, IS_QUEUED).limit(1)
    )
    queued, _ = queue_counts(session, queue_id).get(queue_id, (0, 0))
    enabled = queue.enabled and retired is None  # a retired organisation's queue takes no task
    return RequeueState(status, queue_id, task_hash, enabled, queue.maxsize, queued, bool(twin))


def mark_requeued(session: Session, task_id: uuid.UUID, state: RequeueState, now: datetime, reason: str) -> None:
    """Queue the task again if its status is still `state.status`."""
    try:
        session.execute(
            update(TASKS)
            .where(Task.id == task_id, Task.status == state.status)
            .values(status=TaskStatus.QUEUED.value, modified_at=now, reason=reason)
        )
    except IntegrityError as exc:
        # A twin was queued in between and the unique index caught it; the caller's transaction is
        # rolled back as the error unwinds it.
        raise twin_queued(state.queue_id, state.hash) from exc


def set_queued_priority(session: Session, task_id: uuid.UUID, priority: int, now: datetime) -> bool:
    """A queued task's new priority; False: the task is not queued (or does not exist)."""
    changed = session.execute(
        update(TASKS).where(Task.id == task_id, IS_QUEUED).values(priority=priority, modified_at=now).returning(Task.id)
    ).first()
    return changed is not None


def task_status(session: Session, task_id: uuid.UUID) -> str | None:
    return session.scalar(select(Task.status).where(Task.id == task_id))
