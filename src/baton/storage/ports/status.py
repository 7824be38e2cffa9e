"""The status page's reads (service/status's port): each costs the same whether `tasks` holds a
thousand rows or ten million (aggregate SQL, the trigger-kept counters, keyset pages). What a newer
release adds to the schema is found by reflection (`schema_probe.py`) and shown as it is."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from baton.core.listing import PageRequest
from baton.core.task_queries import TaskFilter
from baton.core.views import (
    ControlPlaneReading,
    EstateReading,
    LeaderRow,
    QueueView,
    SchedulerRecord,
    SchedulerRows,
    TaskRow,
)
from baton.storage.control.leadership import leaders
from baton.storage.engine import Store
from baton.storage.ports.rows import view_of
from baton.storage.queues import listings, status_reads
from baton.storage.queues.task_pages import task_page
from baton.storage.schema_probe import SchemaProbe


class StatusReads:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.schema = SchemaProbe(store)

    @property
    def dialect(self) -> str:
        return self.store.dialect

    def estate(self, now: datetime, heartbeat_timeout: float, failed_since: datetime) -> EstateReading:
        with self.store.session() as session:
            failed, capped = status_reads.failed_since(session, failed_since)
            return EstateReading(
                estate=listings.estate_counts(session, now, heartbeat_timeout),
                failed=failed,
                failed_capped=capped,
                type_totals=status_reads.type_totals(session),
                oldest_by_type=status_reads.oldest_queued_by_type(session),
            )

    def organisations(self, request: PageRequest) -> list[str]:
        """Up to `limit + 1` organisations' ids of the keyset page (`listings.organisations_page`)."""
        with self.store.session() as session:
            return [org.id for org in listings.organisations_page(session, request)]

    def queues_of(self, organisations: Sequence[str]) -> tuple[list[QueueView], dict[str, datetime]]:
        """The organisations' queues with their counts (the counters), and when the oldest queued task of
        each non-empty one was created (one index probe each)."""
        with self.store.session() as session:
            rows = listings.schedulers_of(session, organisations)
            counts = listings.counts_of(session, [row.id for row in rows])
            views = [
                QueueView(row.id, row.organisation, row.type, *counts.get(row.id, (0, 0)), row.maxsize, row.enabled)
                for row in rows
            ]
            return views, status_reads.oldest_queued(session, [view.id for view in views if view.size > 0])

    def schedulers(self, request: PageRequest, problems_at: tuple[datetime, float] | None) -> SchedulerRows:
        """Up to `limit + 1` schedulers of the keyset page; `problems_at` (now, heartbeat timeout): only
        the failed and stale ones."""
        reflected = self.schema.current()
        problems = None if problems_at is None else listings.problem_condition(*problems_at)
        with self.store.session() as session:
            rows = [view_of(SchedulerRecord, row) for row in listings.schedulers_page(session, request, problems)]
            extras = reflected.extra_columns(session, [row.id for row in rows])
        return SchedulerRows(rows, extras, reflected.scheduler_extras)

    def control_plane(self, organisations: int, table_rows: int) -> ControlPlaneReading:
        """Leaders, the first `organisations` ids, the workers table's first `table_rows` rows, lease owners."""
        reflected = self.schema.current()
        with self.store.session() as session:
            first = PageRequest("organisations", limit=organisations)
            return ControlPlaneReading(
                leaders=[view_of(LeaderRow, row) for row in leaders(session)],
                organisations=[org.id for org in listings.organisations_page(session, first)],
                workers=reflected.workers_snapshot(session, table_rows),
                lease_owners=reflected.lease_owners(session),
            )

    def task_page(self, wanted: TaskFilter, before: int | None, limit: int) -> list[TaskRow]:
        """`limit` + 1 tasks matching `wanted`, newest first, older than `before` (`task_pages.task_page`)."""
        with self.store.session() as session:
            return task_page(session, wanted, listings.queue_ids(session) if wanted.q else [], before, limit)

    def queued_total(self, organisation: str | None, kind: str | None) -> int:
        with self.store.session() as session:
            return listings.queued_total(session, organisation, kind)
