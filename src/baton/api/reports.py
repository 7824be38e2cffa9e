"""Report schedules: cron expressions per organisation that the report scheduler turns into report
tasks. They are schedules of the report scheduler (see `/schedules`, OpenKAT's view of them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from fastapi import Response, status
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from baton.api import routing, security
from baton.api.deps import Responses, StoreDep
from baton.api.schemas import ErrorOut
from baton.core.cron import is_valid_cron, next_cron_run
from baton.core.errors import NotFoundError
from baton.core.jobs import ReportJob, job_hash
from baton.core.model import SchedulerType, utcnow
from baton.storage import schedules as rows
from baton.storage.tables import Schedule

router = routing.router(prefix="/organisations/{org_id}/report-schedules", tags=["reports"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation or schedule"}}
REPORT = SchedulerType.REPORT.value


class ReportScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str = Field(min_length=1, max_length=128, examples=["0 6 * * 1"])
    data: dict[str, Any] = Field(
        default_factory=dict,
        description="Kept in the report task's `data`; `report_recipe_id` names the recipe (default: the schedule).",
    )
    enabled: StrictBool = True

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if not is_valid_cron(value):
            raise ValueError(f"'{value}' is not a valid cron expression")
        return value


class ReportScheduleOut(BaseModel):
    id: uuid.UUID
    organisation: str
    cron: str
    data: dict[str, Any]
    enabled: bool
    next_run_at: datetime | None
    last_run_at: datetime | None


def schedule_out(row: Schedule) -> ReportScheduleOut:
    return ReportScheduleOut(
        id=row.id,
        organisation=row.organisation,
        cron=row.schedule or "",
        data=row.data,
        enabled=row.enabled,
        next_run_at=row.deadline_at,
        last_run_at=row.last_run_at,
    )


@router.post("", status_code=status.HTTP_201_CREATED, responses=UNKNOWN, dependencies=[security.ADMIN])
def create(org_id: str, body: ReportScheduleIn, store: StoreDep) -> ReportScheduleOut:
    job = ReportJob.model_validate(
        {
            **body.data,
            "organisation_id": org_id,
            "report_recipe_id": str(body.data.get("report_recipe_id") or uuid.uuid4()),
        }
    )
    with store.session() as session:
        schedule = rows.create_schedule(
            session,
            scheduler_id=REPORT,
            organisation=org_id,
            data=job.model_dump(mode="json"),
            schedule=body.cron,
            deadline_at=next_cron_run(body.cron, utcnow()),
            schedule_hash=job_hash(job),
            enabled=body.enabled,
        )
        return schedule_out(schedule)


@router.get("", responses=UNKNOWN, dependencies=[security.READ])
def list_all(org_id: str, store: StoreDep) -> list[ReportScheduleOut]:
    with store.session() as session:
        rows.get_organisation(session, org_id)
        _, found = rows.list_schedules(
            session, conditions=[Schedule.organisation == org_id, Schedule.scheduler_id == REPORT], limit=10_000
        )
        return [schedule_out(row) for row in sorted(found, key=lambda row: row.created_at)]


@router.delete(
    "/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, responses=UNKNOWN, dependencies=[security.ADMIN]
)
def delete(org_id: str, schedule_id: uuid.UUID, store: StoreDep) -> Response:
    with store.session() as session:
        row = session.get(Schedule, schedule_id)
        if row is None or row.organisation != org_id or row.scheduler_id != REPORT:
            raise NotFoundError(f"report schedule '{schedule_id}' not found in organisation '{org_id}'")
        session.delete(row)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
