"""The status page's view of the schedulers: a keyset page of them (by organisation, then id;
searchable by organisation), where each runs, its state by the heartbeat rule (`baton.core.heartbeat`)
and who holds its lease until when; the estate's counts by aggregate SQL (`storage/queues/listings.py`).
Columns a newer schema adds are shown as they are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from baton.core.heartbeat import is_stale, live_state
from baton.core.listing import Page, PageRequest
from baton.core.model import SchedulerState
from baton.core.views import EstateCounts, SchedulerRecord
from baton.service.status.overview import seconds_since


@dataclass(frozen=True)
class SchedulerStatus:
    id: str
    organisation: str
    type: str
    enabled: bool
    runner: str | None
    location: str | None
    host: str | None
    pid: int | None
    pod: str | None
    reported_state: str
    state: str
    stale: bool
    last_heartbeat: datetime | None
    heartbeat_age_seconds: float | None
    restarts: int | None
    owner: str | None
    term: int
    lease_expires_at: datetime | None
    lease_expires_in_seconds: float | None  # negative: expired that long ago
    extra: dict[str, Any]  # columns a newer release added, as they are

    @property
    def problem(self) -> bool:
        return self.stale or self.state == SchedulerState.FAILED.value


@dataclass(frozen=True)
class SchedulerPage:
    generated_at: datetime
    heartbeat_timeout_seconds: float
    schedulers: list[SchedulerStatus]
    estate: EstateCounts
    problems: int  # in the whole estate: failed, stale ones included
    limit: int
    organisation: str | None
    q: str | None
    problems_only: bool
    next_cursor: str | None
    previous_cursor: str | None
    extra_columns: list[str]


def split_location(location: str | None) -> tuple[str | None, int | None]:
    """`host:pid` (core.identity.process_location) into its parts."""
    if not location:
        return None, None
    host, _, pid = location.rpartition(":")
    if not host or not pid.isdigit():
        return location, None
    return host, int(pid)


def scheduler_status(row: SchedulerRecord, now: datetime, timeout: float, extra: dict[str, Any]) -> SchedulerStatus:
    reported = SchedulerState(row.state)
    host, pid = split_location(row.location)
    expires = row.lease_expires_at
    return SchedulerStatus(
        id=row.id,
        organisation=row.organisation,
        type=row.type,
        enabled=row.enabled,
        runner=row.runner,
        location=row.location,
        host=host,
        pid=pid,
        # A pod's host name is the pod's name (Kubernetes' default, which the runner keeps).
        pod=host if row.runner == "kubernetes" else None,
        reported_state=reported.value,
        state=live_state(reported, row.heartbeat_at, now, timeout).value,
        stale=is_stale(reported, row.heartbeat_at, now, timeout),
        last_heartbeat=row.heartbeat_at,
        heartbeat_age_seconds=seconds_since(row.heartbeat_at, now),
        restarts=None,  # not recorded in the database by this release (the runner keeps it in memory)
        owner=row.owner,
        term=int(row.term or 0),
        lease_expires_at=expires,
        lease_expires_in_seconds=None if expires is None else (expires - now).total_seconds(),
        extra=extra,
    )


def scheduler_page(
    page: Page[SchedulerRecord],
    extras: dict[str, dict[str, Any]],
    extra_columns: list[str],
    estate: EstateCounts,
    request: PageRequest,
    now: datetime,
    timeout: float,
    *,
    problems_only: bool,
) -> SchedulerPage:
    """A page of schedulers as read (`StatusRecords.schedulers`), with the estate's counts."""
    statuses: Sequence[SchedulerStatus] = [
        scheduler_status(row, now, timeout, extras.get(row.id, {})) for row in page.rows
    ]
    return SchedulerPage(
        generated_at=now,
        heartbeat_timeout_seconds=timeout,
        schedulers=list(statuses),
        estate=estate,
        problems=estate.by_state.get(SchedulerState.FAILED.value, 0),
        limit=request.limit,
        organisation=request.organisation,
        q=request.prefix,
        problems_only=problems_only,
        next_cursor=page.next_cursor,
        previous_cursor=page.previous_cursor,
        extra_columns=extra_columns,
    )
