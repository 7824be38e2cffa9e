"""Report schedules: cron expressions per organisation that the report scheduler turns into report
tasks. They are schedules of the report scheduler (see `/schedules`, OpenKAT's view of them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from fastapi import Response, status
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from baton.api import routing, security
from baton.api.deps import AppServicesDep, Responses
from baton.api.schemas import ErrorOut
from baton.core.cron import is_valid_cron
from baton.core.views import ScheduleView

router = routing.router(prefix="/organisations/{org_id}/report-schedules", tags=["reports"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation or schedule"}}


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


def schedule_out(row: ScheduleView) -> ReportScheduleOut:
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
def create(org_id: str, body: ReportScheduleIn, services: AppServicesDep) -> ReportScheduleOut:
    return schedule_out(services.schedules.create_report_schedule(org_id, body.cron, body.data, body.enabled))


@router.get("", responses=UNKNOWN, dependencies=[security.READ])
def list_all(org_id: str, services: AppServicesDep) -> list[ReportScheduleOut]:
    return [schedule_out(row) for row in services.schedules.report_schedules(org_id)]


@router.delete(
    "/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, responses=UNKNOWN, dependencies=[security.ADMIN]
)
def delete(org_id: str, schedule_id: uuid.UUID, services: AppServicesDep) -> Response:
    services.schedules.delete_report_schedule(org_id, schedule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
