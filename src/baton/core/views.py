"""What the services read from the database, as plain values: storage builds them (storage/ports/), the
services hand them on, the API turns them into its schemas and the status page shows them. No ORM row
leaves storage.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from baton.core.filters import FilterTree


@dataclass(frozen=True)
class OrganisationView:
    id: str
    name: str
    weight: int
    max_in_flight: int | None
    created_at: datetime
    retired_at: datetime | None


@dataclass(frozen=True)
class PluginView:
    """A plugin of the catalogue (`enabled`: the default for organisations without their own setting)."""

    id: str
    type: str
    name: str
    consumes: list[str]
    scan_level: int
    enabled: bool
    version: str | None
    oci_image: str | None


@dataclass(frozen=True)
class ScheduleView:
    id: uuid.UUID
    scheduler_id: str
    organisation: str
    hash: str | None
    data: dict[str, Any]
    enabled: bool
    schedule: str | None
    deadline_at: datetime | None
    created_at: datetime
    modified_at: datetime
    last_run_at: datetime | None
    disabled_reason: str | None
    disabled_detail: str | None


@dataclass(frozen=True)
class SchedulerRecord:
    """A scheduler (one queue) as stored: its state as it last reported it, its lease."""

    id: str
    organisation: str
    type: str
    maxsize: int
    enabled: bool
    runner: str | None
    state: str
    location: str | None
    heartbeat_at: datetime | None
    owner: str | None
    term: int
    lease_expires_at: datetime | None


@dataclass(frozen=True)
class LeaderRow:
    """A role's leader as the leaders table records it."""

    role: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime


@dataclass(frozen=True)
class StoreCounts:
    """What /metrics reads from the database at scrape time (the same on every replica)."""

    queues: dict[str, tuple[int, int]]  # queue id -> (queued, in flight), from the counters
    recovered: int  # times recovery re-queued or failed a stuck task
    leaders: list[LeaderRow]


@dataclass(frozen=True)
class Leadership:
    role: str
    holder: str
    term: int
    expires_at: datetime | None


@dataclass(frozen=True)
class ScheduleQuery:
    """Which schedules a listing shows: equal columns, inclusive time ranges, a filter-language tree."""

    scheduler_id: str | None = None
    organisation: str | None = None
    hash: str | None = None
    enabled: bool | None = None
    min_deadline_at: datetime | None = None
    max_deadline_at: datetime | None = None
    min_created_at: datetime | None = None
    max_created_at: datetime | None = None
    matching: FilterTree | None = None


@dataclass(frozen=True)
class EstateCounts:
    """The whole estate in a few numbers, each from one aggregate statement."""

    organisations: int
    schedulers: int
    disabled: int
    by_state: dict[str, int]  # by the heartbeat rule: a stale scheduler counts as failed
    stale: int  # claim to run without a heartbeat within the timeout
    queued: int
    in_flight: int


@dataclass(frozen=True)
class EstateReading:
    """The status page's snapshot as read: the estate's counts and the totals per type, each by
    aggregate SQL."""

    estate: EstateCounts
    failed: dict[str, int]  # failures since the window's start per queue
    failed_capped: bool  # more failed than the scan counts
    type_totals: dict[str, tuple[int, int, int, int]]  # type -> (queues, queued, in flight, full queues)
    oldest_by_type: dict[str, datetime]  # type -> its oldest queued task's creation


@dataclass(frozen=True)
class TaskRow:
    seq: int
    id: uuid.UUID
    scheduler_id: str
    organisation: str
    type: str
    priority: int
    status: str
    hash: str | None
    attempts: int
    reason: str | None
    created_at: datetime
    modified_at: datetime


@dataclass(frozen=True)
class TaskEntry:
    """One task as the status page shows it: its row, its schedule and its job."""

    row: TaskRow
    schedule_id: str | None
    data: dict[str, Any]


@dataclass(frozen=True)
class RequeueState:
    """What a requeue is decided on: the task (locked until the transaction ends) and its queue."""

    status: str
    queue_id: str
    hash: str | None
    enabled: bool
    maxsize: int
    queued: int
    twin: bool  # a task with its hash is queued in its queue


@dataclass(frozen=True)
class TableSnapshot:
    """Rows of a table this release does not model (found by reflection), shown as they are."""

    name: str
    columns: list[str]
    rows: list[dict[str, Any]]
    truncated: bool


@dataclass(frozen=True)
class QueueView:
    id: str
    organisation: str
    type: str
    size: int
    in_flight: int
    maxsize: int
    enabled: bool


@dataclass(frozen=True)
class SchedulerRows:
    """A page of schedulers as read (up to `limit + 1`), with the columns a newer release added."""

    rows: list[SchedulerRecord]
    extras: dict[str, dict[str, Any]]  # scheduler id -> its extra columns' values
    extra_columns: list[str]


@dataclass(frozen=True)
class ControlPlaneReading:
    """The control plane as the database records it."""

    leaders: list[LeaderRow]
    organisations: list[str]  # the first few, by id: whose RabbitMQ queues the page looks at
    workers: TableSnapshot | None  # None: the database has no workers table
    lease_owners: list[tuple[str | None, int]]  # (owner, schedulers)
