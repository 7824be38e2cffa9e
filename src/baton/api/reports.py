"""Report schedules: cron expressions per organisation that the report scheduler turns into tasks."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from croniter import croniter
from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from sqlalchemy import select

from baton.api.deps import Responses, StoreDep
from baton.models import ReportSchedule, utcnow
from baton.schedulers import next_cron_run
from baton.schemas import ErrorOut
from baton.store import NotFoundError, get_organisation

router = APIRouter(prefix="/organisations/{org_id}/report-schedules", tags=["reports"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation or schedule"}}


class ReportScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str = Field(min_length=1, max_length=128, examples=["0 6 * * 1"])
    data: dict[str, Any] = Field(default_factory=dict, description="Handed to the report task as `data.report`.")
    enabled: StrictBool = True

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if not croniter.is_valid(value):
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


@router.post("", status_code=status.HTTP_201_CREATED, responses=UNKNOWN)
def create(org_id: str, body: ReportScheduleIn, store: StoreDep) -> ReportScheduleOut:
    with store.session() as session:
        get_organisation(session, org_id)
        schedule = ReportSchedule(
            id=uuid.uuid4(),
            organisation=org_id,
            cron=body.cron,
            data=body.data,
            enabled=body.enabled,
            next_run_at=next_cron_run(body.cron, utcnow()),
            created_at=utcnow(),
        )
        session.add(schedule)
        session.flush()
        return ReportScheduleOut.model_validate(schedule)


@router.get("", responses=UNKNOWN)
def list_all(org_id: str, store: StoreDep) -> list[ReportScheduleOut]:
    with store.session() as session:
        get_organisation(session, org_id)
        rows = session.scalars(
            select(ReportSchedule).where(ReportSchedule.organisation == org_id).order_by(ReportSchedule.created_at)
        )
        return [ReportScheduleOut.model_validate(row) for row in rows]


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, responses=UNKNOWN)
def delete(org_id: str, schedule_id: uuid.UUID, store: StoreDep) -> Response:
    with store.session() as session:
        row = session.get(ReportSchedule, schedule_id)
        if row is None or row.organisation != org_id:
            raise NotFoundError(f"report schedule '{schedule_id}' not found in organisation '{org_id}'")
        session.delete(row)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
