"""The operator's actions on one task, offered by the status page: requeue it, change its priority.

A requeue is admitted as a push is (`baton.core.admission`): a disabled queue refuses it (409), a
full one too (429), and a task whose hash is queued already is not doubled (409: that twin runs
instead). The task keeps its id, attempts and fair-queuing tag; `reason` says who requeued it and
from which status.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from baton.core.admission import admit
from baton.core.errors import ConflictError
from baton.core.logging import get_logger
from baton.core.model import TaskStatus, utcnow
from baton.core.views import RequeueState, TaskEntry
from baton.service.tasks import REQUEUABLE, TaskDetail, task_detail

log = get_logger("baton.status")


class TaskActions(Protocol):
    """One task and the actions on it, each in one transaction (storage/ports/operator.py)."""

    def task(self, task_id: uuid.UUID) -> TaskEntry | None: ...

    def requeue(self, task_id: uuid.UUID, now: datetime, decide: Callable[[RequeueState], str]) -> TaskEntry | None: ...

    def change_priority(self, task_id: uuid.UUID, priority: int, now: datetime) -> tuple[bool, TaskEntry | None]: ...


def requeue_reason(task_id: uuid.UUID, state: RequeueState, actor: str) -> str:
    """A failed task, or a dispatched or running one that looks stuck, goes back in its queue when its
    queue admits it: the reason written on it; ConflictError (or admission's error) refuses it."""
    if TaskStatus(state.status) not in REQUEUABLE:
        raise ConflictError(
            f"task '{task_id}' is '{state.status}': only a failed, dispatched or running task can be requeued"
        )
    admit(
        state.queue_id,
        enabled=state.enabled,
        maxsize=state.maxsize,
        queued=state.queued,
        twin=state.twin,
        on_duplicate="refuse",
        task_hash=state.hash,
    )
    return f"requeued by {actor} from {state.status}"


class OperatorActions:
    """The actions, each in its own transaction, answered with the task as it is afterwards."""

    def __init__(self, actions: TaskActions) -> None:
        self.actions = actions

    def requeue(self, task_id: uuid.UUID, actor: str) -> TaskDetail:
        entry = self.actions.requeue(task_id, utcnow(), lambda state: requeue_reason(task_id, state, actor))
        detail = task_detail(task_id, entry)
        log.info("task requeued", task=str(task_id), by=actor)
        return detail

    def change_priority(self, task_id: uuid.UUID, priority: int, actor: str) -> TaskDetail:
        """A queued task's new priority (lower pops first); any other status: 409."""
        changed, entry = self.actions.change_priority(task_id, priority, utcnow())
        detail = task_detail(task_id, entry)
        if not changed:
            status = detail.task.status
            raise ConflictError(f"task '{task_id}' is '{status}': only a queued task's priority can change")
        log.info("task priority changed", task=str(task_id), priority=priority, by=actor)
        return detail

    def task(self, task_id: uuid.UUID) -> TaskDetail:
        return task_detail(task_id, self.actions.task(task_id))
