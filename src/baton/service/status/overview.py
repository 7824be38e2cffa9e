"""The status page's overview: every queue's counts and age, summed per type and per organisation.

Every read costs the same whether `tasks` holds a thousand rows or ten million: queued and in-flight
counts come from the trigger-kept counters (`baton.service.queues.queue_views`), failures of the last
hour from a capped range scan and the oldest queued task from one index probe per queue
(`storage/status_reads.py`), the rates from this process's counters (`rates.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from baton.core.admission import is_full
from baton.core.model import SchedulerType
from baton.service.queues import QueueView
from baton.service.status.rates import Rates
from baton.storage.engine import Session
from baton.storage.status_reads import failed_since, oldest_queued

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
    def of(cls, name: str, queues: Iterable[QueueStatus]) -> Totals:
        queues = list(queues)
        ages = [queue.oldest_queued_seconds for queue in queues if queue.oldest_queued_seconds is not None]
        return cls(
            name=name,
            queued=sum(queue.queued for queue in queues),
            in_flight=sum(queue.in_flight for queue in queues),
            failed_last_hour=sum(queue.failed_last_hour for queue in queues),
            oldest_queued_seconds=max(ages) if ages else None,
            full_queues=sum(queue.full for queue in queues),
            queues=len(queues),
        )


@dataclass(frozen=True)
class OrganisationStatus:
    organisation: str
    totals: Totals
    queues: list[QueueStatus]


@dataclass(frozen=True)
class Overview:
    generated_at: datetime
    total: Totals
    by_type: list[Totals]
    organisations: list[OrganisationStatus]
    organisations_total: int
    offset: int
    limit: int
    failed_window_seconds: float
    failed_capped: bool
    rates: Rates


def queue_statuses(session: Session, views: Sequence[QueueView], now: datetime) -> tuple[list[QueueStatus], bool]:
    failed, capped = failed_since(session, now - FAILED_WINDOW)
    oldest = oldest_queued(session, [view.id for view in views if view.size > 0])
    statuses = [
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
    return statuses, capped


def build_overview(
    statuses: Sequence[QueueStatus], capped: bool, rates: Rates, now: datetime, offset: int, limit: int
) -> Overview:
    """Totals per type and per organisation; organisations with the most queued work first."""
    by_organisation: dict[str, list[QueueStatus]] = {}
    for status in statuses:
        by_organisation.setdefault(status.organisation, []).append(status)
    organisations = [
        OrganisationStatus(name, Totals.of(name, queues), sorted(queues, key=lambda queue: queue.type))
        for name, queues in by_organisation.items()
    ]
    organisations.sort(key=lambda org: (-org.totals.queued, -org.totals.in_flight, org.organisation))
    by_type = [Totals.of(kind.value, (s for s in statuses if s.type == kind.value)) for kind in SchedulerType]
    return Overview(
        generated_at=now,
        total=Totals.of("all", statuses),
        by_type=by_type,
        organisations=organisations[offset : offset + limit],
        organisations_total=len(organisations),
        offset=offset,
        limit=limit,
        failed_window_seconds=FAILED_WINDOW.total_seconds(),
        failed_capped=capped,
        rates=rates,
    )
