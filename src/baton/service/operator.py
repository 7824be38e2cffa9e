"""The operator's actions on one task, offered by the status page: requeue it, change its priority.

A requeue is admitted as a push is (`baton.core.admission`): a disabled queue refuses it (409), a
full one too (429), and a task whose hash is queued already is not doubled (409: that twin runs
instead). The task keeps its id, attempts and fair-queuing tag; `reason` says who requeued it and
from which status.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from baton.core.admission import admit
from baton.core.errors import ConflictError, NotFoundError
from baton.core.logging import get_logger
from baton.core.model import TaskStatus, utcnow
from baton.service.tasks import REQUEUABLE, TaskDetail, task_detail
from baton.storage.engine import Session, Store
from baton.storage.queues.task_actions import mark_requeued, requeue_state, set_queued_priority, task_status

log = get_logger("baton.status")


def requeue(session: Session, task_id: uuid.UUID, now: datetime, actor: str) -> None:
    """Put a failed task, or a dispatched or running one that looks stuck, back in its queue."""
    state = requeue_state(session, task_id)
    if state is None:
        raise NotFoundError(f"task '{task_id}' not found")
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
    mark_requeued(session, task_id, state, now, f"requeued by {actor} from {state.status}")


def change_priority(session: Session, task_id: uuid.UUID, priority: int, now: datetime) -> None:
    """A queued task's new priority (lower pops first); any other status: 409."""
    if set_queued_priority(session, task_id, priority, now):
        return
    status = task_status(session, task_id)
    if status is None:
        raise NotFoundError(f"task '{task_id}' not found")
    raise ConflictError(f"task '{task_id}' is '{status}': only a queued task's priority can change")


class OperatorActions:
    """The actions, each in its own transaction, answered with the task as it is afterwards."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def requeue(self, task_id: uuid.UUID, actor: str) -> TaskDetail:
        with self.store.session() as session:
            requeue(session, task_id, utcnow(), actor)
            detail = task_detail(session, task_id)
        log.info("task requeued", task=str(task_id), by=actor)
        return detail

    def change_priority(self, task_id: uuid.UUID, priority: int, actor: str) -> TaskDetail:
        with self.store.session() as session:
            change_priority(session, task_id, priority, utcnow())
            detail = task_detail(session, task_id)
        log.info("task priority changed", task=str(task_id), priority=priority, by=actor)
        return detail
