"""Tasks: the API's listing (OpenKAT's page and query parameters) and hourly statistics, one task as
a record, and one task as the status page shows it, with what an operator may do to it.

Lists of tasks have one home in storage (`storage/queues/task_pages.py`), reached through the ports
(`TaskListings`, storage/ports/tasks.py); this module shapes the answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from baton.core.errors import NotFoundError
from baton.core.filters import FilterTree
from baton.core.lifecycle import may_precede
from baton.core.model import TaskStatus, utcnow
from baton.core.task_queries import TaskQuery
from baton.core.views import TaskEntry, TaskRow

STATS_ORDER = ("pending", *(status.value for status in TaskStatus))
CANCELLABLE = may_precede(TaskStatus.CANCELLED)
REQUEUABLE = frozenset({TaskStatus.FAILED, TaskStatus.DISPATCHED, TaskStatus.RUNNING})
REPRIORITISABLE = frozenset({TaskStatus.QUEUED})


class TaskListings(Protocol):
    """Lists of tasks (storage/ports/tasks.py); `conditions` are the port's own, handed back to it."""

    def conditions(self, query: TaskQuery) -> Sequence[Any]: ...

    def page(
        self, conditions: Sequence[Any], tree: FilterTree | None, limit: int, offset: int
    ) -> tuple[int, list[dict[str, Any]]]: ...

    def hourly_counts(self, query: TaskQuery, since: datetime) -> list[tuple[datetime, str, int]]: ...


class TaskListing:
    """The tasks matching a listing's query, newest first. Made from the query alone, so that a
    contradictory range is refused (400) before a filter body is read."""

    def __init__(self, listings: TaskListings, query: TaskQuery) -> None:
        self.listings = listings
        self.conditions = listings.conditions(query)

    def page(self, limit: int, offset: int, tree: FilterTree | None = None) -> tuple[int, list[dict[str, Any]]]:
        """How many match in all, and the records of the page at `offset`."""
        return self.listings.page(self.conditions, tree, limit, offset)


class Tasks:
    """The API's lists of tasks: OpenKAT's listing and its hourly statistics."""

    def __init__(self, listings: TaskListings) -> None:
        self.listings = listings

    def listing(self, query: TaskQuery) -> TaskListing:
        return TaskListing(self.listings, query)

    def hourly_stats(self, query: TaskQuery) -> dict[str, dict[str, int]]:
        """Tasks per hour of their last change over the past 24 hours, per status (OpenKAT's shape: hours
        newest first, `pending` always 0 in Baton, `total` per hour)."""
        counts = self.listings.hourly_counts(query, utcnow() - timedelta(hours=24))
        hours: dict[datetime, dict[str, int]] = {}
        for hour, status, number in counts:
            bucket = hours.setdefault(hour, dict.fromkeys(STATS_ORDER, 0))
            bucket[status] = bucket.get(status, 0) + number
        document = {}
        for hour in sorted(hours, reverse=True):
            bucket = hours[hour]
            bucket["total"] = sum(bucket.values())
            document[hour.isoformat()] = bucket
        return document


@dataclass(frozen=True)
class TaskDetail:
    task: TaskRow
    schedule_id: str | None
    data: dict[str, Any]
    can_cancel: bool
    can_requeue: bool
    can_change_priority: bool


def task_detail(task_id: uuid.UUID, entry: TaskEntry | None) -> TaskDetail:
    """The task as read (`entry`; None: there is none, NotFoundError) with what may be done to it."""
    if entry is None:
        raise NotFoundError(f"task '{task_id}' not found")
    status = TaskStatus(entry.row.status)
    return TaskDetail(
        task=entry.row,
        schedule_id=entry.schedule_id,
        data=entry.data,
        can_cancel=status in CANCELLABLE,
        can_requeue=status in REQUEUABLE,
        can_change_priority=status in REPRIORITISABLE,
    )
