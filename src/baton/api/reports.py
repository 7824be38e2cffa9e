"""Report schedules: cron expressions per organisation that the report scheduler turns into tasks."""

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
from baton.core.model import utcnow
from baton.storage import reports as rows

router = routing.router(prefix="/organisations/{org_id}/report-schedules", tags=["reports"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation or schedule"}}


class ReportScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str = Field(min_length=1, max_length=128, examples=["0 6 * * 1"])
    data: dict[str, Any] = Field(default_factory=dict, description="Handed to the report task as `data.report`.")
    enabled: StrictBool = True

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if not is_valid_cron(value):
            raise ValueError(f"'{value}' is not a valid cron expression")
        return value


class ReportScheduleOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    organisation: str
    cron: str
    data: dict[str, Any]
    enabled: bool
    next_run_at: datetime
    last_run_at: datetime | None


@router.post("", status_code=status.HTTP_201_CREATED, responses=UNKNOWN, dependencies=[security.ADMIN])
def create(org_id: str, body: ReportScheduleIn, store: StoreDep) -> ReportScheduleOut:
    with store.session() as session:
        schedule = rows.create_schedule(
            session, org_id, body.cron, body.data, body.enabled, next_cron_run(body.cron, utcnow())
        )
        return ReportScheduleOut.model_validate(schedule)


@router.get("", responses=UNKNOWN, dependencies=[security.READ])
def list_all(org_id: str, store: StoreDep) -> list[ReportScheduleOut]:
    with store.session() as session:
        return [ReportScheduleOut.model_validate(row) for row in rows.list_schedules(session, org_id)]


@router.delete(
    "/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, responses=UNKNOWN, dependencies=[security.ADMIN]
)
def delete(org_id: str, schedule_id: uuid.UUID, store: StoreDep) -> Response:
    with store.session() as session:
        rows.delete_schedule(session, org_id, schedule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
