"""Schedules: when to create a boefje or report task again (OpenKAT's schedules), and report
schedules (an organisation's cron schedules of the report scheduler; OpenKAT sees them as schedules).

A schedule has a cron expression (`schedule`) or a one-off `deadline_at` (or both), and the job to
queue as `data`; its hash is the job's (OpenKAT's formula) and unique. The boefje and report
schedulers queue due schedules; cron schedules get their next deadline, one-off ones none.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from baton.core.cron import check_cron, first_deadline, next_cron_run
from baton.core.errors import ContradictoryInputError, NotFoundError
from baton.core.filters import SCHEDULE_COLUMNS, parse_filters
from baton.core.jobs import ReportJob, job_document, job_hash, job_of
from baton.core.model import SchedulerType, utcnow
from baton.core.settings import Settings
from baton.storage.control.organisations import adopt_organisation, get_organisation
from baton.storage.engine import Store
from baton.storage.scheduling import schedules as rows
from baton.storage.scheduling.schedules import ScheduleQuery as ScheduleQuery
from baton.storage.tables import Schedule as Schedule

__all__ = ["Schedule", "ScheduleQuery"]
SCHEDULER_TYPES = frozenset(kind.value for kind in SchedulerType)
REPORT = SchedulerType.REPORT.value
REPORT_SCHEDULES_SHOWN = 10_000


@dataclass(frozen=True)
class NewSchedule:
    scheduler_id: str
    organisation: str
    data: dict[str, Any]
    schedule: str | None
    deadline_at: datetime | None
    hash: str


def new_schedule(
    scheduler_id: str,
    organisation: str,
    data: dict[str, Any],
    schedule: str | None,
    deadline_at: datetime | None,
    now: datetime | None = None,
) -> NewSchedule:
    """A schedule to create, checked in this order: a cron expression or a deadline, a valid cron, a
    known scheduler, `data` a job of its type (the schedule takes the job's hash). First due at
    `deadline_at`, else at the cron's next run."""
    if deadline_at is None and schedule is None:
        raise ContradictoryInputError("Either deadline_at or schedule must be provided")
    check_cron(schedule)
    if scheduler_id not in SCHEDULER_TYPES:
        raise ContradictoryInputError(f"Scheduler {scheduler_id} not found")
    kind = SchedulerType(scheduler_id)
    job = job_of(kind, data)
    due = first_deadline(schedule, deadline_at, now or utcnow())
    return NewSchedule(kind.value, organisation, data, schedule, due, job_hash(job))


def create_schedule(store: Store, new: NewSchedule, settings: Settings) -> Schedule:
    """Store it (an unknown organisation is created by the auto-organisation rule, or NotFoundError);
    ConflictError when a schedule with its hash exists."""
    with store.session() as session:
        adopt_organisation(session, new.organisation, auto=settings.auto_organisations, maxsize=settings.queue_maxsize)
        return rows.create_schedule(
            session,
            scheduler_id=new.scheduler_id,
            organisation=new.organisation,
            data=new.data,
            schedule=new.schedule,
            deadline_at=new.deadline_at,
            schedule_hash=new.hash,
        )


def check_ranges(query: ScheduleQuery) -> None:
    ranges = [
        ("deadline_at", query.min_deadline_at, query.max_deadline_at),
        ("created_at", query.min_created_at, query.max_created_at),
    ]
    for name, low, high in ranges:
        if low is not None and high is not None and low > high:
            raise ContradictoryInputError(f"min_{name} must be less than max_{name}")


def list_schedules(store: Store, query: ScheduleQuery, limit: int, offset: int) -> tuple[int, Sequence[Schedule]]:
    """A page of the schedules the query matches, newest first, and how many match in all."""
    check_ranges(query)
    with store.session() as session:
        return rows.list_schedules(session, query, limit=limit, offset=offset)


def search_schedules(store: Store, filters: Any, limit: int, offset: int) -> tuple[int, Sequence[Schedule]]:
    """Like `list_schedules`, for a filter in the filter language over schedule columns (None: all)."""
    matching = parse_filters(filters, columns=SCHEDULE_COLUMNS) if filters is not None else None
    return list_schedules(store, ScheduleQuery(matching=matching), limit, offset)


def get_schedule(store: Store, schedule_id: uuid.UUID) -> Schedule:
    with store.session() as session:
        return rows.get_schedule(session, schedule_id)


def update_schedule(store: Store, schedule_id: uuid.UUID, changes: Mapping[str, Any]) -> Schedule:
    """Change the fields given (at least one; a cron expression must be valid)."""
    if not changes:
        raise ContradictoryInputError("no data to patch")
    check_cron(changes.get("schedule"))
    with store.session() as session:
        return rows.update_schedule(session, schedule_id, changes)


def delete_schedule(store: Store, schedule_id: uuid.UUID) -> None:
    """Gone afterwards, whether or not it existed (as OpenKAT has it)."""
    with store.session() as session:
        rows.delete_schedule(session, schedule_id)


# -- report schedules --------------------------------------------------------------------------------


def create_report_schedule(store: Store, org_id: str, cron: str, data: dict[str, Any], enabled: bool) -> Schedule:
    """A report job of the organisation from `data` (its recipe `report_recipe_id`, by default a new
    id), due first at the cron's next run."""
    recipe = str(data.get("report_recipe_id") or uuid.uuid4())
    job = ReportJob.model_validate({**data, "organisation_id": org_id, "report_recipe_id": recipe})
    with store.session() as session:
        return rows.create_schedule(
            session,
            scheduler_id=REPORT,
            organisation=org_id,
            data=job_document(job),
            schedule=cron,
            deadline_at=next_cron_run(cron, utcnow()),
            schedule_hash=job_hash(job),
            enabled=enabled,
        )


def list_report_schedules(store: Store, org_id: str) -> list[Schedule]:
    """The organisation's report schedules, oldest first."""
    with store.session() as session:
        get_organisation(session, org_id)
        query = ScheduleQuery(organisation=org_id, scheduler_id=REPORT)
        _, found = rows.list_schedules(session, query, limit=REPORT_SCHEDULES_SHOWN)
        return sorted(found, key=lambda row: row.created_at)


def delete_report_schedule(store: Store, org_id: str, schedule_id: uuid.UUID) -> None:
    with store.session() as session:
        if not rows.delete_schedule(session, schedule_id, organisation=org_id, scheduler_id=REPORT):
            raise NotFoundError(f"report schedule '{schedule_id}' not found in organisation '{org_id}'")
