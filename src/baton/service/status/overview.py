"""The status page's overview: the estate in counts (organisations, schedulers by state, queued and
in-flight tasks), totals per type, and a keyset page of organisations with their queues.

Every read costs the same whether `tasks` holds a thousand rows or ten million, and the estate's
counts and the totals are aggregate SQL, not a listing of every organisation: queued and in-flight
counts come from the trigger-kept counters, failures of the last hour from a capped range scan and
the oldest queued task from one index probe per non-empty queue (`storage/queues/status_reads.py`,
`storage/queues/listings.py`), the rates from this process's counters (`rates.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from baton.core.admission import is_full
from baton.core.model import SchedulerType
from baton.core.views import EstateCounts, EstateReading, QueueView
from baton.service.status.rates import Rates

FAILED_WINDOW = timedelta(hours=1)


def seconds_since(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else max(0.0, (now - moment).total_seconds())


@dataclass(frozen=True)
class QueueStatus:
    id: str
    organisation: str
    type: str
    queued: int
    in_flight: int
    failed_last_hour: int
    oldest_queued_at: datetime | None
    oldest_queued_seconds: float | None
    maxsize: int
    full: bool
    enabled: bool

    def totals(self) -> Totals:
        """This one queue as totals."""
        return Totals(
            self.id, self.queued, self.in_flight, self.failed_last_hour, self.oldest_queued_seconds, int(self.full), 1
        )


@dataclass(frozen=True)
class Totals:
    """The sum over some queues (one type, one organisation, or all)."""

    name: str
    queued: int
    in_flight: int
    failed_last_hour: int
    oldest_queued_seconds: float | None
    full_queues: int
    queues: int

    @classmethod
    def summed(cls, name: str, rows: Iterable[Totals]) -> Totals:
        """The sum of totals (of queues, of types): counts add up, the oldest age is the largest."""
        rows = list(rows)
        ages = [row.oldest_queued_seconds for row in rows if row.oldest_queued_seconds is not None]
        return cls(
            name=name,
            queued=sum(row.queued for row in rows),
            in_flight=sum(row.in_flight for row in rows),
            failed_last_hour=sum(row.failed_last_hour for row in rows),
            oldest_queued_seconds=max(ages) if ages else None,
            full_queues=sum(row.full_queues for row in rows),
            queues=sum(row.queues for row in rows),
        )


@dataclass(frozen=True)
class OrganisationStatus:
    organisation: str
    totals: Totals
    queues: list[QueueStatus]


@dataclass(frozen=True)
class Overview:
    generated_at: datetime
    estate: EstateCounts
    estate_taken_at: datetime  # when the counts and totals were taken (`snapshot.py`)
    total: Totals
    by_type: list[Totals]
    organisations: list[OrganisationStatus]  # a keyset page, by id
    organisations_total: int
    limit: int
    q: str | None
    next_cursor: str | None
    previous_cursor: str | None
    failed_window_seconds: float
    failed_capped: bool
    rates: Rates


def queue_statuses(
    views: Sequence[QueueView], oldest: dict[str, datetime], failed: dict[str, int], now: datetime
) -> list[QueueStatus]:
    """The queues of a page with their age (`oldest`: when each non-empty one's oldest task was queued)
    and failures."""
    return [
        QueueStatus(
            id=view.id,
            organisation=view.organisation,
            type=view.type,
            queued=view.size,
            in_flight=view.in_flight,
            failed_last_hour=failed.get(view.id, 0),
            oldest_queued_at=oldest.get(view.id),
            oldest_queued_seconds=seconds_since(oldest.get(view.id), now),
            maxsize=view.maxsize,
            full=is_full(view.maxsize, view.size),
            enabled=view.enabled,
        )
        for view in views
    ]


def type_rows(reading: EstateReading, now: datetime) -> list[Totals]:
    """Totals per type from the aggregates read (`storage/queues/status_reads.py`), not by listing the queues."""
    totals = reading.type_totals
    oldest = reading.oldest_by_type
    failed_by_type: dict[str, int] = {}
    for queue_id, count in reading.failed.items():
        kind = queue_id.partition("-")[0]
        failed_by_type[kind] = failed_by_type.get(kind, 0) + count
    rows = []
    for kind in SchedulerType:
        queues, queued, in_flight, full = totals.get(kind.value, (0, 0, 0, 0))
        age = seconds_since(oldest.get(kind.value), now)
        rows.append(Totals(kind.value, queued, in_flight, failed_by_type.get(kind.value, 0), age, full, queues))
    return rows


def organisation_rows(organisations: Sequence[str], statuses: Sequence[QueueStatus]) -> list[OrganisationStatus]:
    """The page's organisations in page order, each with its queues by type."""
    by_organisation: dict[str, list[QueueStatus]] = {name: [] for name in organisations}
    for status in statuses:
        by_organisation.setdefault(status.organisation, []).append(status)
    return [
        OrganisationStatus(
            name,
            Totals.summed(name, (queue.totals() for queue in queues)),
            sorted(queues, key=lambda queue: queue.type),
        )
        for name, queues in by_organisation.items()
    ]


def sorted_by_type(queues: Iterable[QueueStatus]) -> list[QueueStatus]:
    return sorted(queues, key=lambda queue: queue.type)
