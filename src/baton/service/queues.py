"""The queue service: push, pop and status changes, for both HTTP dialects and the status page.

Each HTTP dialect only translates paths and bodies; the rules live here or below: the size limit
on `data`, where a pop looks (one queue, or every queue of a type in fair or strict order), the
caps of organisations with `max_in_flight`, and the metrics every pop and push feeds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy.orm import Session

from baton.core.errors import NotFoundError, PayloadTooLargeError
from baton.core.filters import FilterTree
from baton.core.model import SchedulerType, TaskStatus, utcnow
from baton.core.settings import Settings
from baton.service.metrics import Metrics
from baton.storage import queues as queue_rows
from baton.storage.engine import Store
from baton.storage.executors import QueueExecutor
from baton.storage.organisations import ensure_organisation
from baton.storage.queues import PushRequest, PushResult
from baton.storage.schedulers import get_scheduler, list_schedulers
from baton.storage.statements import PopTarget
from baton.storage.tasks import RECORD_COLUMNS, find_task

CAPS_REFRESH_SECONDS = 2.0
SCHEDULER_TYPES = frozenset(kind.value for kind in SchedulerType)


@dataclass(frozen=True)
class QueueView:
    id: str
    organisation: str
    type: str
    size: int
    in_flight: int
    maxsize: int
    enabled: bool


def check_data_size(data: object, limit: int) -> None:
    size = len(orjson.dumps(data))
    if size > limit:
        raise PayloadTooLargeError(f"data: {size} bytes exceeds the limit of {limit} bytes")


class QueueService:
    def __init__(self, store: Store, settings: Settings, executor: QueueExecutor, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.executor = executor
        self.metrics = metrics
        self._caps_known_at = float("-inf")
        self._caps = False

    # -- the hot path ------------------------------------------------------------------------------
    def target(self, queue: str | None = None, task_type: str | None = None) -> PopTarget:
        if task_type is not None:
            return PopTarget(type=task_type, fair=self.settings.fairness)
        return PopTarget(queue=queue)

    async def _caps_in_use(self) -> bool:
        """Whether any organisation has a `max_in_flight` (checked every few seconds, not per pop;
        through the executor: a blocking query here would stall every request on the event loop)."""
        if time.monotonic() - self._caps_known_at > CAPS_REFRESH_SECONDS:
            self._caps_known_at = time.monotonic()  # first: concurrent pops do not all ask at once
            self._caps = await self.executor.any_caps()
        return self._caps

    async def pop(self, target: PopTarget, limit: int = 1, tree: FilterTree | None = None) -> list[dict[str, Any]]:
        """Hand out up to `limit` tasks (each to this caller only); [] when there are none.

        An unknown queue raises NotFoundError (an empty one answers [])."""
        started = time.perf_counter()
        caps = target.type is not None and await self._caps_in_use()
        now = utcnow()
        tasks = await self.executor.pop(target, limit=limit, now=now, tree=tree, caps=caps)
        self.metrics.pop_latency.observe(time.perf_counter() - started)
        if not tasks and target.queue is not None and not await self.executor.queue_exists(target.queue):
            raise NotFoundError(f"queue '{target.queue}' not found")
        self._count_pops(tasks, now)
        return tasks

    def _count_pops(self, tasks: Sequence[dict[str, Any]], now: datetime) -> None:
        for task in tasks:
            pops, dwell = self.metrics.per_queue(task["scheduler_id"], task["organisation"], task["type"])
            pops.inc()
            dwell.observe(max(0.0, (now - task["created_at"]).total_seconds()))

    async def push(self, request: PushRequest) -> PushResult:
        check_data_size(request.data, self.settings.max_data_bytes)
        result = await self.executor.push(request, utcnow())
        self.metrics.pushes.labels(request.queue, "created" if result.created else "deduplicated").inc()
        return result

    async def change_status(self, task_id: uuid.UUID, status: TaskStatus) -> dict[str, Any]:
        return await self.executor.change_status(task_id, status, utcnow())

    async def ensure_organisation(self, organisation: str) -> bool:
        """Create the organisation and its queues if missing; True when it exists afterwards."""

        def work() -> bool:
            with self.store.session() as session:
                ensure_organisation(session, organisation, self.settings.queue_maxsize)
            return True

        return await asyncio.to_thread(work)

    async def find(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        """One task as a record, or None (not on the hot path: a thread hop is fine)."""

        def work() -> dict[str, Any] | None:
            with self.store.session() as session:
                row = find_task(session, task_id)
                return None if row is None else {column: getattr(row, column) for column in RECORD_COLUMNS}

        return await asyncio.to_thread(work)

    # -- reading queues ----------------------------------------------------------------------------
    def list_queues(self, session: Session) -> list[QueueView]:
        counts = queue_rows.queue_counts(session)
        return [
            QueueView(
                id=row.id,
                organisation=row.organisation,
                type=row.type,
                size=counts.get(row.id, (0, 0))[0],
                in_flight=counts.get(row.id, (0, 0))[1],
                maxsize=row.maxsize,
                enabled=row.enabled,
            )
            for row in list_schedulers(session)
        ]

    def get_queue(self, session: Session, queue_id: str) -> QueueView:
        row = get_scheduler(session, queue_id)
        queued, in_flight = queue_rows.queue_counts(session, queue_id).get(queue_id, (0, 0))
        return QueueView(row.id, row.organisation, row.type, queued, in_flight, row.maxsize, row.enabled)

    async def close(self) -> None:
        await self.executor.close()
