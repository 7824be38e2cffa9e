"""The status page's view of the schedulers: where each runs and its state by the heartbeat rule
(`baton.core.heartbeat`), with the lease columns a newer schema may add, shown as they are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from baton.core.heartbeat import is_stale, live_state
from baton.core.model import SchedulerState
from baton.service.status.overview import seconds_since
from baton.storage.tables import Scheduler


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
    lease: dict[str, Any]

    @property
    def problem(self) -> bool:
        return self.stale or self.state == SchedulerState.FAILED.value


@dataclass(frozen=True)
class SchedulerPage:
    generated_at: datetime
    heartbeat_timeout_seconds: float
    schedulers: list[SchedulerStatus]
    total: int
    problems: int
    offset: int
    limit: int
    problems_only: bool
    lease_columns: list[str]


def split_location(location: str | None) -> tuple[str | None, int | None]:
    """`host:pid` (core.identity.process_location) into its parts."""
    if not location:
        return None, None
    host, _, pid = location.rpartition(":")
    if not host or not pid.isdigit():
        return location, None
    return host, int(pid)


def scheduler_status(row: Scheduler, now: datetime, timeout: float, lease: dict[str, Any]) -> SchedulerStatus:
    reported = SchedulerState(row.state)
    host, pid = split_location(row.location)
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
        lease=lease,
    )


def scheduler_page(
    rows: Sequence[Scheduler],
    leases: dict[str, dict[str, Any]],
    lease_columns: list[str],
    now: datetime,
    timeout: float,
    *,
    offset: int,
    limit: int,
    problems_only: bool,
) -> SchedulerPage:
    """Stale and failed schedulers first (`problems_only`: only those), then by id."""
    statuses = [scheduler_status(row, now, timeout, leases.get(row.id, {})) for row in rows]
    problems = [status for status in statuses if status.problem]
    shown = problems if problems_only else sorted(statuses, key=lambda s: (not s.problem, s.id))
    return SchedulerPage(
        generated_at=now,
        heartbeat_timeout_seconds=timeout,
        schedulers=shown[offset : offset + limit],
        total=len(shown),
        problems=len(problems),
        offset=offset,
        limit=limit,
        problems_only=problems_only,
        lease_columns=lease_columns,
    )
