"""One task as the status page shows it, and the operator's actions on it, each in one transaction
(service/operator.py's and service/tasks.py's ports)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

from baton.core.views import RequeueState, TaskEntry
from baton.storage.engine import Session, Store
from baton.storage.queues import task_actions, task_rows
from baton.storage.queues.task_pages import page_row


def task_entry(session: Session, task_id: uuid.UUID) -> TaskEntry | None:
    task = task_rows.find_task(session, task_id)
    return None if task is None else TaskEntry(page_row(task), task.schedule_id, task.data)


class TaskActions:
    def __init__(self, store: Store) -> None:
        self.store = store

    def task(self, task_id: uuid.UUID) -> TaskEntry | None:
        with self.store.session() as session:
            return task_entry(session, task_id)

    def requeue(self, task_id: uuid.UUID, now: datetime, decide: Callable[[RequeueState], str]) -> TaskEntry | None:
        """`decide(state)`: the reason of the requeue, or an error that refuses it. None: no such task."""
        with self.store.session() as session:
            state = task_actions.requeue_state(session, task_id)
            if state is None:
                return None
            task_actions.mark_requeued(session, task_id, state, now, decide(state))
            return task_entry(session, task_id)

    def change_priority(self, task_id: uuid.UUID, priority: int, now: datetime) -> tuple[bool, TaskEntry | None]:
        """Whether the task was queued and took the priority, and the task afterwards (None: no such task)."""
        with self.store.session() as session:
            changed = task_actions.set_queued_priority(session, task_id, priority, now)
            return changed, task_entry(session, task_id)
