"""Read models for the status page (`/ui`), and the operator actions it offers (`baton.service.operator`).

Every read costs the same whether `tasks` holds a thousand rows or ten million (see each module):
- `overview.py`: totals per type, a keyset page of organisations with their queues;
- `snapshot.py`: the estate's counts and totals by aggregate SQL, shared a while when the estate is large;
- `rates.py`: pop and push rates, sampled from this process's counters;
- `scheduler_views.py`: a keyset page of schedulers by the heartbeat rule;
- `control_plane.py`: leaders, workers, lease owners, RabbitMQ, KATalogus, Octopoes and Bytes;
- `task_views.py`: keyset pages of tasks (one task: `baton.service.tasks.task_detail`).

The database may be newer than this code (another release adds scheduler leases or a `workers`
table): those parts are found by reflection (`storage/schema_probe.py`) and shown as they are, and
missing ones are reported as missing instead of failing the page.
"""

from __future__ import annotations

import uuid

from baton.core.listing import PageRequest, cut_page
from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.core.task_queries import TaskFilter
from baton.service.metrics import Metrics
from baton.service.operator import OperatorActions
from baton.service.queues import QueueService, queue_views_of
from baton.service.status.control_plane import BrokerProbe, BrokerQueues, ControlPlane, read_control_plane
from baton.service.status.overview import FAILED_WINDOW, Overview, Totals, organisation_rows, queue_statuses
from baton.service.status.rates import RateSampler
from baton.service.status.scheduler_views import SchedulerPage, scheduler_page
from baton.service.status.snapshot import SnapshotCache, take_snapshot
from baton.service.status.task_views import TaskPage, tasks_page
from baton.service.tasks import TaskDetail, task_detail
from baton.storage.engine import Store
from baton.storage.queues.listings import organisations_page, problem_condition, schedulers_page
from baton.storage.schema_probe import SchemaProbe

__all__ = [
    "BrokerProbe",
    "ControlPlane",
    "Overview",
    "PageRequest",
    "RateSampler",
    "SchedulerPage",
    "StatusService",
    "TaskDetail",
    "TaskFilter",
    "TaskPage",
]
MAX_PAGE = 200


class StatusService:
    """Everything the status page shows or does, for one app (one store, one process's metrics)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        queues: QueueService,
        metrics: Metrics,
        broker: BrokerProbe | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.queues = queues
        self.rates = RateSampler(metrics)
        self.schema = SchemaProbe(store)
        self.broker = broker
        self.operator = OperatorActions(store)
        self.outside = metrics.outside
        timeout = settings.timing.heartbeat_timeout_seconds
        self.snapshots = SnapshotCache(lambda: take_snapshot(store, timeout))

    def overview(self, request: PageRequest) -> Overview:
        """The estate's snapshot (aggregate SQL, `snapshot.py`) and a keyset page of organisations."""
        snapshot = self.snapshots.current()
        now = utcnow()
        with self.store.session() as session:
            page = cut_page(request, list(organisations_page(session, request)), lambda org: (org.id,))
            names = [org.id for org in page.rows]
            statuses = queue_statuses(session, queue_views_of(session, names), snapshot.failed, now)
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
        reflected = self.schema.current()
        problems = problem_condition(now, timeout) if problems_only else None
        with self.store.session() as session:
            rows = list(schedulers_page(session, request, problems))
            page = cut_page(request, rows, lambda row: (row.organisation, row.id))
            extras = reflected.extra_columns(session, [row.id for row in page.rows])
        return scheduler_page(
            page, extras, reflected.scheduler_extras, estate, request, now, timeout, problems_only=problems_only
        )

    def control_plane(self, broker_queues: BrokerQueues | None) -> ControlPlane:
        """`broker_queues(organisations)`: the dead-letter queue and the queues to look at (their names
        belong to the ingest layer, which passes them in)."""
        return read_control_plane(self.store, self.settings, self.schema, self.broker, broker_queues, self.outside)

    def tasks(self, wanted: TaskFilter, before: int | None = None, limit: int = 50) -> TaskPage:
        with self.store.session() as session:
            return tasks_page(session, wanted, before, min(limit, MAX_PAGE))

    def task(self, task_id: uuid.UUID) -> TaskDetail:
        with self.store.session() as session:
            return task_detail(session, task_id)

    def requeue(self, task_id: uuid.UUID, actor: str) -> TaskDetail:
        return self.operator.requeue(task_id, actor)

    def change_priority(self, task_id: uuid.UUID, priority: int, actor: str) -> TaskDetail:
        return self.operator.change_priority(task_id, priority, actor)
