"""The status page's keyset pages of tasks: no count of matching rows, ever (the queued total comes
from the counters when they answer the filter). One task with what may be done to it is
`baton.service.tasks.task_detail`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from baton.core.model import TaskStatus, utcnow
from baton.core.task_queries import TaskFilter
from baton.core.views import TaskRow


class TaskPageRecords(Protocol):
    """Keyset pages of tasks and the counters' queued totals (storage/ports/status.py)."""

    def task_page(self, wanted: TaskFilter, before: int | None, limit: int) -> list[TaskRow]: ...

    def queued_total(self, organisation: str | None, kind: str | None) -> int: ...


@dataclass(frozen=True)
class TaskPage:
    filter: TaskFilter
    tasks: list[TaskRow]
    limit: int
    before: int | None
    next_before: int | None  # the cursor of the next (older) page; None: this is the last one
    known_total: int | None  # from the counters, when they answer the filter (status queued)
    generated_at: datetime


def tasks_page(records: TaskPageRecords, wanted: TaskFilter, before: int | None, limit: int) -> TaskPage:
    """Newest first, `limit` at a time, older than `before` (a `seq`)."""
    rows = records.task_page(wanted, before, limit)
    known_total = None
    if wanted.status is TaskStatus.QUEUED and not wanted.q:
        kind = wanted.type.value if wanted.type is not None else None
        known_total = records.queued_total(wanted.organisation, kind)
    return TaskPage(
        filter=wanted,
        tasks=rows[:limit],
        limit=limit,
        before=before,
        next_before=rows[limit - 1].seq if len(rows) > limit else None,
        known_total=known_total,
        generated_at=utcnow(),
    )
