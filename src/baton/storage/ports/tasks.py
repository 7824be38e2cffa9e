"""Lists of tasks for the API (OpenKAT's listing and statistics; service/tasks.py's port)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from baton.core.filters import FilterTree
from baton.core.task_queries import TaskQuery
from baton.storage.engine import Store
from baton.storage.queues import task_pages, task_rows


class TaskListings:
    def __init__(self, store: Store) -> None:
        self.store = store

    def conditions(self, query: TaskQuery) -> Sequence[Any]:
        """The query as the listing's conditions (a contradictory range is refused here, before a body is read)."""
        return task_pages.listing_conditions(query, self.store.dialect)

    def page(
        self, conditions: Sequence[Any], tree: FilterTree | None, limit: int, offset: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """How many match in all, and the records of the page at `offset`, newest first."""
        if tree is not None:
            conditions = [*conditions, task_pages.filter_condition(tree, self.store.dialect)]
        with self.store.session() as session:
            count, rows = task_pages.list_tasks(session, conditions=list(conditions), limit=limit, offset=offset)
            return count, [task_rows.record(row) for row in rows]

    def hourly_counts(self, query: TaskQuery, since: datetime) -> list[tuple[datetime, str, int]]:
        conditions = task_pages.listing_conditions(query, self.store.dialect)
        with self.store.session() as session:
            return list(task_pages.hourly_counts(session, since, conditions))
