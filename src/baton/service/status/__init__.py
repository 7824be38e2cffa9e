"""Read models for the status page (`/ui`), and the operator actions it offers (`baton.service.operator`).

Every read costs the same whether `tasks` holds a thousand rows or ten million (see each module):
- `overview.py`: totals per type, a keyset page of organisations with their queues;
- `snapshot.py`: the estate's counts and totals by aggregate SQL, shared a while when the estate is large;
- `rates.py`: pop and push rates, sampled from this process's counters;
- `scheduler_views.py`: a keyset page of schedulers by the heartbeat rule;
- `control_plane.py`: leaders, workers, lease owners, RabbitMQ, KATalogus, Octopoes and Bytes;
- `task_views.py`: keyset pages of tasks (one task: `baton.service.tasks.task_detail`).

What the page reads from the database is `StatusRecords` (storage/ports/status.py builds the reads).
The database may be newer than this code (another release adds scheduler leases or a `workers`
table): those parts are found by reflection (`storage/schema_probe.py`) and shown as they are, and
missing ones are reported as missing instead of failing the page.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from baton.core.listing import PageRequest, cut_page
from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.core.task_queries import TaskFilter
from baton.core.views import QueueView, SchedulerRows
from baton.service.metrics import Metrics
from baton.service.operator import OperatorActions
from baton.service.queues import QueueService
from baton.service.status.control_plane import (
    BrokerProbe,
    BrokerQueues,
    ControlPlane,
    ControlPlaneRecords,
    read_control_plane,
)
from baton.service.status.overview import FAILED_WINDOW, Overview, Totals, organisation_rows, queue_statuses
from baton.service.status.rates import RateSampler
from baton.service.status.scheduler_views import SchedulerPage, scheduler_page
from baton.service.status.snapshot import EstateRecords, SnapshotCache, take_snapshot
from baton.service.status.task_views import TaskPage, TaskPageRecords, tasks_page
from baton.service.tasks import TaskDetail

__all__ = [
    "BrokerProbe",
    "ControlPlane",
    "Overview",
    "PageRequest",
    "RateSampler",
    "SchedulerPage",
    "StatusRecords",
    "StatusService",
    "TaskDetail",
    "TaskFilter",
    "TaskPage",
]
MAX_PAGE = 200


class StatusRecords(EstateRecords, ControlPlaneRecords, TaskPageRecords, Protocol):
    """What the page reads from the database (storage/ports/status.py)."""

    def organisations(self, request: PageRequest) -> list[str]: ...

    def queues_of(self, organisations: Sequence[str]) -> tuple[list[QueueView], dict[str, datetime]]: ...

    def schedulers(self, request: PageRequest, problems_at: tuple[datetime, float] | None) -> SchedulerRows: ...


class StatusService:
    """Everything the status page shows or does, for one app (one database, one process's metrics)."""

    def __init__(
        self,
        records: StatusRecords,
        operator: OperatorActions,
        settings: Settings,
        queues: QueueService,
        metrics: Metrics,
        broker: BrokerProbe | None = None,
    ) -> None:
        self.records = records
        self.settings = settings
        self.queues = queues
        self.rates = RateSampler(metrics)
        self.broker = broker
        self.operator = operator
        self.outside = metrics.outside
        timeout = settings.timing.heartbeat_timeout_seconds
        self.snapshots = SnapshotCache(lambda: take_snapshot(records, timeout))

    def overview(self, request: PageRequest) -> Overview:
        """The estate's snapshot (aggregate SQL, `snapshot.py`) and a keyset page of organisations."""
        snapshot = self.snapshots.current()
        now = utcnow()
        page = cut_page(request, self.records.organisations(request), lambda name: (name,))
        names = page.rows
        views, oldest = self.records.queues_of(names)
        statuses = queue_statuses(views, oldest, snapshot.failed, now)
        return Overview(
            generated_at=now,
            estate=snapshot.estate,
            estate_taken_at=snapshot.taken_at,
            total=Totals.summed("all", snapshot.by_type),
            by_type=snapshot.by_type,
            organisations=organisation_rows(names, statuses),
            organisations_total=snapshot.estate.organisations,
            limit=request.limit,
            q=request.prefix,
            next_cursor=page.next_cursor,
            previous_cursor=page.previous_cursor,
            failed_window_seconds=FAILED_WINDOW.total_seconds(),
            failed_capped=snapshot.failed_capped,
            rates=self.rates.rates(),
        )

    def schedulers(self, request: PageRequest, problems_only: bool = False) -> SchedulerPage:
        """A keyset page of schedulers (`problems_only`: failed or stale ones) with the estate's counts."""
        estate = self.snapshots.current().estate
        now = utcnow()
        timeout = self.settings.timing.heartbeat_timeout_seconds
        found = self.records.schedulers(request, (now, timeout) if problems_only else None)
        page = cut_page(request, found.rows, lambda row: (row.organisation, row.id))
        return scheduler_page(
            page, found.extras, found.extra_columns, estate, request, now, timeout, problems_only=problems_only
        )

    def control_plane(self, broker_queues: BrokerQueues | None) -> ControlPlane:
        """`broker_queues(organisations)`: the dead-letter queue and the queues to look at (their names
        belong to the ingest layer, which passes them in)."""
        return read_control_plane(self.records, self.settings, self.broker, broker_queues, self.outside)

    def tasks(self, wanted: TaskFilter, before: int | None = None, limit: int = 50) -> TaskPage:
        return tasks_page(self.records, wanted, before, min(limit, MAX_PAGE))

    def task(self, task_id: uuid.UUID) -> TaskDetail:
        return self.operator.task(task_id)

    def requeue(self, task_id: uuid.UUID, actor: str) -> TaskDetail:
        return self.operator.requeue(task_id, actor)

    def change_priority(self, task_id: uuid.UUID, priority: int, actor: str) -> TaskDetail:
        return self.operator.change_priority(task_id, priority, actor)
