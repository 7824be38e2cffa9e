"""Schedules: when to create a boefje or report task again (OpenKAT's schedules), and report
schedules (an organisation's cron schedules of the report scheduler; OpenKAT sees them as schedules).

A schedule has a cron expression (`schedule`) or a one-off `deadline_at` (or both), and the job to
queue as `data`; its hash is the job's (OpenKAT's formula) and unique. The boefje and report
schedulers queue due schedules; cron schedules get their next deadline, one-off ones none.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from baton.core.cron import check_cron, first_deadline, next_cron_run
from baton.core.errors import ContradictoryInputError, NotFoundError
from baton.core.filters import SCHEDULE_COLUMNS, parse_filters
from baton.core.jobs import ReportJob, job_document, job_hash, job_of
from baton.core.model import SchedulerType, utcnow
from baton.core.views import ScheduleQuery as ScheduleQuery
from baton.core.views import ScheduleView

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


def check_ranges(query: ScheduleQuery) -> None:
    ranges = [
        ("deadline_at", query.min_deadline_at, query.max_deadline_at),
        ("created_at", query.min_created_at, query.max_created_at),
    ]
    for name, low, high in ranges:
        if low is not None and high is not None and low > high:
            raise ContradictoryInputError(f"min_{name} must be less than max_{name}")


class ScheduleRecords(Protocol):
    """The stored schedules (storage/ports/schedules.py)."""

    def create(
        self,
        *,
        scheduler_id: str,
        organisation: str,
        data: dict[str, Any],
        schedule: str | None,
        deadline_at: datetime | None,
        schedule_hash: str,
        enabled: bool = True,
        adopt: tuple[bool, int] | None = None,
    ) -> ScheduleView: ...

    def find(self, query: ScheduleQuery, limit: int, offset: int = 0) -> tuple[int, list[ScheduleView]]: ...

    def of_organisation(self, org_id: str, query: ScheduleQuery, limit: int) -> list[ScheduleView]: ...

    def get(self, schedule_id: uuid.UUID) -> ScheduleView: ...

    def update(self, schedule_id: uuid.UUID, changes: Mapping[str, Any]) -> ScheduleView: ...

    def delete(
        self, schedule_id: uuid.UUID, organisation: str | None = None, scheduler_id: str | None = None
    ) -> bool: ...


class Schedules:
    """OpenKAT's schedules and the organisations' report schedules."""

    def __init__(self, records: ScheduleRecords, auto_organisations: bool, queue_maxsize: int) -> None:
        self.records = records
        self.adopt = (auto_organisations, queue_maxsize)

    def create(self, new: NewSchedule) -> ScheduleView:
        """Store it (an unknown organisation is created by the auto-organisation rule, or NotFoundError);
        ConflictError when a schedule with its hash exists."""
        return self.records.create(
            scheduler_id=new.scheduler_id,
            organisation=new.organisation,
            data=new.data,
            schedule=new.schedule,
            deadline_at=new.deadline_at,
            schedule_hash=new.hash,
            adopt=self.adopt,
        )

    def find(self, query: ScheduleQuery, limit: int, offset: int) -> tuple[int, list[ScheduleView]]:
        """A page of the schedules the query matches, newest first, and how many match in all."""
        check_ranges(query)
        return self.records.find(query, limit, offset)

    def search(self, filters: Any, limit: int, offset: int) -> tuple[int, list[ScheduleView]]:
        """Like `list`, for a filter in the filter language over schedule columns (None: all)."""
        matching = parse_filters(filters, columns=SCHEDULE_COLUMNS) if filters is not None else None
        return self.find(ScheduleQuery(matching=matching), limit, offset)

    def get(self, schedule_id: uuid.UUID) -> ScheduleView:
        return self.records.get(schedule_id)

    def update(self, schedule_id: uuid.UUID, changes: Mapping[str, Any]) -> ScheduleView:
        """Change the fields given (at least one; a cron expression must be valid)."""
        if not changes:
            raise ContradictoryInputError("no data to patch")
        check_cron(changes.get("schedule"))
        return self.records.update(schedule_id, changes)

    def delete(self, schedule_id: uuid.UUID) -> None:
        """Gone afterwards, whether or not it existed (as OpenKAT has it)."""
        self.records.delete(schedule_id)

    # -- report schedules ----------------------------------------------------------------------------

    def create_report_schedule(self, org_id: str, cron: str, data: dict[str, Any], enabled: bool) -> ScheduleView:
        """A report job of the organisation from `data` (its recipe `report_recipe_id`, by default a new
        id), due first at the cron's next run."""
        recipe = str(data.get("report_recipe_id") or uuid.uuid4())
        job = ReportJob.model_validate({**data, "organisation_id": org_id, "report_recipe_id": recipe})
        return self.records.create(
            scheduler_id=REPORT,
            organisation=org_id,
            data=job_document(job),
            schedule=cron,
            deadline_at=next_cron_run(cron, utcnow()),
            schedule_hash=job_hash(job),
            enabled=enabled,
        )

    def report_schedules(self, org_id: str) -> list[ScheduleView]:
        """The organisation's report schedules, oldest first."""
        query = ScheduleQuery(organisation=org_id, scheduler_id=REPORT)
        found = self.records.of_organisation(org_id, query, REPORT_SCHEDULES_SHOWN)
        return sorted(found, key=lambda row: row.created_at)

    def delete_report_schedule(self, org_id: str, schedule_id: uuid.UUID) -> None:
        if not self.records.delete(schedule_id, organisation=org_id, scheduler_id=REPORT):
            raise NotFoundError(f"report schedule '{schedule_id}' not found in organisation '{org_id}'")
