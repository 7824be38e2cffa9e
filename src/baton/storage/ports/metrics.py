"""The counts /metrics reads at scrape time, and the outside services' recorded states (service/metrics.py's
and service/outside_services.py's ports)."""

from __future__ import annotations

from baton.core.outside_services import Recorded
from baton.core.views import LeaderRow, StoreCounts
from baton.storage.control.leadership import leaders
from baton.storage.engine import Store
from baton.storage.ports.rows import view_of
from baton.storage.queues.operations import queue_counts
from baton.storage.queues.status_reads import recovered_total
from baton.storage.scheduling.service_states import outside_services


class MetricRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def counts(self) -> StoreCounts:
        with self.store.session() as session:
            return StoreCounts(
                queues=queue_counts(session),
                recovered=recovered_total(session),
                leaders=[view_of(LeaderRow, row) for row in leaders(session)],
            )


class ServiceStateRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def recorded(self) -> dict[str, Recorded]:
        """Every outside service a caller recorded, by name (one small table: a handful of rows)."""
        with self.store.session() as session:
            return {
                row.service: Recorded(row.down_since, row.reason, row.checked_at) for row in outside_services(session)
            }
