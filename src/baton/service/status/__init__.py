"""Read models for the status page (`/ui`), and the operator actions it offers (`baton.service.operator`).

Every read costs the same whether `tasks` holds a thousand rows or ten million (see each module):
- `overview.py`: queue statuses and their totals, per type and per organisation;
- `rates.py`: pop and push rates, sampled from this process's counters;
- `scheduler_views.py`: the schedulers by the heartbeat rule;
- `control_plane.py`: leaders, workers, lease owners, RabbitMQ, KATalogus, Octopoes and Bytes;
- `task_views.py`: keyset pages of tasks (one task: `baton.service.tasks.task_detail`).

The database may be newer than this code (another release adds scheduler leases or a `workers`
table): those parts are found by reflection (`storage/schema_probe.py`) and shown as they are, and
missing ones are reported as missing instead of failing the page.
"""

from __future__ import annotations

import uuid

from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.core.task_queries import TaskFilter
from baton.service.metrics import Metrics
from baton.service.operator import OperatorActions
from baton.service.queues import QueueService, queue_views
from baton.service.status.control_plane import BrokerProbe, BrokerQueues, ControlPlane, read_control_plane
from baton.service.status.overview import Overview, build_overview, queue_statuses
from baton.service.status.rates import RateSampler
from baton.service.status.scheduler_views import SchedulerPage, scheduler_page
from baton.service.status.task_views import TaskPage, tasks_page
from baton.service.tasks import TaskDetail, task_detail
from baton.storage.engine import Store
from baton.storage.scheduler_rows import list_schedulers
from baton.storage.schema_probe import SchemaProbe

__all__ = [
    "BrokerProbe",
    "ControlPlane",
    "Overview",
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

    def overview(self, offset: int = 0, limit: int = 50) -> Overview:
        now = utcnow()
        with self.store.session() as session:
            statuses, capped = queue_statuses(session, queue_views(session), now)
        return build_overview(statuses, capped, self.rates.rates(), now, offset, min(limit, MAX_PAGE))

    def schedulers(self, offset: int = 0, limit: int = 50, problems_only: bool = False) -> SchedulerPage:
        now = utcnow()
        reflected = self.schema.current()
        with self.store.session() as session:
            rows = list_schedulers(session)
            leases = reflected.lease_columns(session)
        timeout = self.settings.timing.heartbeat_timeout_seconds
        return scheduler_page(
            rows,
            leases,
            reflected.scheduler_extras,
            now,
            timeout,
            offset=offset,
            limit=min(limit, MAX_PAGE),
            problems_only=problems_only,
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
