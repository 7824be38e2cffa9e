"""The status page's keyset pages of tasks: no count of matching rows, ever (the queued total comes
from the counters when they answer the filter). One task with what may be done to it is
`baton.service.tasks.task_detail`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from baton.core.model import TaskStatus, utcnow
from baton.core.task_queries import TaskFilter
from baton.storage.engine import Session
from baton.storage.queues.listings import queue_ids, queued_total
from baton.storage.queues.task_pages import TaskRow, task_page


@dataclass(frozen=True)
class TaskPage:
    filter: TaskFilter
    tasks: list[TaskRow]
    limit: int
    before: int | None
    next_before: int | None  # the cursor of the next (older) page; None: this is the last one
    known_total: int | None  # from the counters, when they answer the filter (status queued)
    generated_at: datetime


def tasks_page(session: Session, wanted: TaskFilter, before: int | None, limit: int) -> TaskPage:
    """Newest first, `limit` at a time, older than `before` (a `seq`)."""
    rows = task_page(session, wanted, queue_ids(session) if wanted.q else [], before, limit)
    known_total = None
    if wanted.status is TaskStatus.QUEUED and not wanted.q:
        kind = wanted.type.value if wanted.type is not None else None
        known_total = queued_total(session, wanted.organisation, kind)
    return TaskPage(
        filter=wanted,
        tasks=rows[:limit],
        limit=limit,
        before=before,
        next_before=rows[limit - 1].seq if len(rows) > limit else None,
        known_total=known_total,
        generated_at=utcnow(),
    )
