"""Reading one task, and recovering the ones nobody reports on (core/recovery.py). Lists of tasks:
`task_pages.py`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from baton.core.model import TaskStatus
from baton.core.queueing import TASK_FIELDS
from baton.core.recovery import (
    TWIN_QUEUED_REASON,
    Action,
    RecoveryRule,
    Verdict,
    reissued_data,
    replaced_reason,
    replaced_status,
    replacement_reason,
)
from baton.storage.queues import statements
from baton.storage.queues.operations import unknown_task
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


def recover_stuck(session: Session, rule: RecoveryRule, now: datetime, limit: int = 500) -> tuple[int, int]:
    """Apply the recovery rule (core/recovery.py) to the dispatched and running tasks it may concern,
    `limit` of each status at most, oldest change first; returns (handed out again, failed).

    A task handed out again becomes a new queued task (fresh id, the old one's priority, fair tag,
    schedule and job) and the old one cancelled or failed, naming the new; one whose twin (same hash)
    is queued already is cancelled instead, as the twin does its work."""
    reissued = failed = 0
    for status, cutoff in rule.cutoffs(now).items():
        for task in session.scalars(stuck_tasks(status, cutoff, limit)).all():
            verdict = rule.verdict(status, (now - task.modified_at).total_seconds(), task.attempts)
            if verdict is None:
                continue
            task.modified_at = now
            if verdict.action is Action.FAIL:
                task.status, task.attempts, task.reason = TaskStatus.FAILED.value, verdict.attempts, verdict.reason
                failed += 1
            elif task.hash is not None and session.scalar(statements.twin_is_queued(task.scheduler_id, task.hash)):
                task.status, task.attempts, task.reason = (
                    TaskStatus.CANCELLED.value,
                    verdict.attempts,
                    TWIN_QUEUED_REASON,
                )
            else:
                _reissue(session, task, status, verdict, now)
                reissued += 1
    return reissued, failed


def _reissue(session: Session, task: Task, status: TaskStatus, verdict: Verdict, now: datetime) -> None:
    """Queue a new task for `task`'s job and retire `task` (its attempts move to the new one)."""
    new_id = uuid.uuid4()
    session.add(
        Task(
            id=new_id,
            scheduler_id=task.scheduler_id,
            schedule_id=task.schedule_id,
            organisation=task.organisation,
            type=task.type,
            priority=task.priority,
            status=TaskStatus.QUEUED.value,
            hash=task.hash,
            data=reissued_data(task.data, task.id, new_id),
            fair_key=task.fair_key,
            attempts=verdict.attempts,
            reason=replacement_reason(task.id, verdict.attempts),
            created_at=now,
            modified_at=now,
        )
    )
    task.status = replaced_status(status).value
    task.attempts = 0
    task.reason = replaced_reason(new_id, verdict.reason)


def stuck_tasks(status: TaskStatus, older_than: datetime, limit: int) -> Select[Any]:
    """Tasks in `status` unchanged since `older_than` (from the index on (status, modified_at)), claimed
    with SKIP LOCKED so two recoverers never take the same one."""
    return (
        select(Task)
        .where(Task.status == status.value, Task.modified_at < older_than)
        .order_by(Task.modified_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
