"""Schedules in OpenKAT's shape, for its web UI: when to create a boefje or report task again.

What a schedule is and the rules for creating, listing and changing one: service/schedules.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from baton.api import routing, security
from baton.api.deps import AppServicesDep, Responses
from baton.api.pages import page
from baton.api.responses import json_response
from baton.api.schemas import MAX_LIST_LIMIT, MAX_OFFSET, ErrorOut, Moment, PopIn, dump_filters
from baton.api.tasks import as_moment
from baton.core.errors import ConflictError
from baton.core.jobs import OpenKatOrganisation
from baton.core.views import ScheduleQuery, ScheduleView
from baton.service.schedules import new_schedule

router = routing.router(prefix="/schedules", tags=["openkat-compatible"])


class ScheduleOut(BaseModel):
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
    last_run_at: datetime | None = None
    disabled_reason: str | None = None  # why the rescans disabled it (None: enabled, or disabled by hand)
    disabled_detail: str | None = None


class ScheduleList(BaseModel):
    count: int
    next: str | None = None
    previous: str | None = None
    results: list[ScheduleOut]


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scheduler_id: str = Field(max_length=16, description="boefje or report")
    organisation: OpenKatOrganisation
    data: dict[str, Any]
    schedule: str | None = Field(None, max_length=128, description="A cron expression.")
    deadline_at: Moment | None = None


class SchedulePatch(BaseModel):
    hash: str | None = Field(None, max_length=64)
    data: dict[str, Any] | None = None
    enabled: bool | None = None
    schedule: str | None = Field(None, max_length=128)
    deadline_at: Moment | None = None


def document(row: ScheduleView) -> dict[str, Any]:
    return ScheduleOut.model_validate(row, from_attributes=True).model_dump(mode="json")


def moment(value: Moment | None) -> datetime | None:
    return as_moment(value) if value is not None else None


def conflict(schedule_hash: str) -> JSONResponse:
    message = f"Conflict error occurred: schedule with the same hash already exists: {schedule_hash}"
    return JSONResponse({"detail": message, "message": message}, status_code=409, headers={"Retry-After": "60"})


Limit = Annotated[int, Query(ge=0, le=MAX_LIST_LIMIT)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


@router.get("", response_model=ScheduleList, dependencies=[security.READ])
def list_schedules(
    request: Request,
    services: AppServicesDep,
    scheduler_id: str | None = None,
    organisation: str | None = None,
    schedule_hash: str | None = None,
    enabled: bool | None = None,
    min_deadline_at: Moment | None = None,
    max_deadline_at: Moment | None = None,
    min_created_at: Moment | None = None,
    max_created_at: Moment | None = None,
    limit: Limit = 10,
    offset: Offset = 0,
) -> Response:
    query = ScheduleQuery(
        scheduler_id=scheduler_id,
        organisation=organisation,
        hash=schedule_hash,
        enabled=enabled,
        min_deadline_at=moment(min_deadline_at),
        max_deadline_at=moment(max_deadline_at),
        min_created_at=moment(min_created_at),
        max_created_at=moment(max_created_at),
    )
    count, found = services.schedules.find(query, limit, offset)
    return schedules_page(request, count, limit, offset, found)


def schedules_page(request: Request, count: int, limit: int, offset: int, found: Sequence[ScheduleView]) -> Response:
    return json_response(page(request, count, limit, offset, [document(row) for row in found]))


@router.post("/search", response_model=ScheduleList, dependencies=[security.READ])
def search_schedules(
    request: Request, services: AppServicesDep, body: PopIn, limit: Limit = 10, offset: Offset = 0
) -> Response:
    """Schedules matching a filter body (`{"filters": ...}`, the filter language over schedule columns)."""
    count, found = services.schedules.search(dump_filters(body.filters), limit, offset)
    return schedules_page(request, count, limit, offset, found)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ScheduleOut,
    responses={
        400: {"model": ErrorOut, "description": "No schedule and no deadline, a bad cron expression, or bad data"},
        409: {"model": ErrorOut, "description": "A schedule with the same hash exists (Retry-After: 60)"},
    },
    dependencies=[security.ADMIN],
)
async def create_schedule(body: ScheduleCreate, services: AppServicesDep) -> Response:
    new = new_schedule(body.scheduler_id, body.organisation, body.data, body.schedule, moment(body.deadline_at))
    try:
        created = await asyncio.to_thread(services.schedules.create, new)
    except ConflictError:
        return conflict(new.hash)
    return json_response(document(created), status.HTTP_201_CREATED)


UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown schedule"}}


@router.get("/{schedule_id}", response_model=ScheduleOut, responses=UNKNOWN, dependencies=[security.READ])
def get_schedule(schedule_id: uuid.UUID, services: AppServicesDep) -> Response:
    return json_response(document(services.schedules.get(schedule_id)))


@router.patch(
    "/{schedule_id}",
    response_model=ScheduleOut,
    responses={**UNKNOWN, 400: {"model": ErrorOut, "description": "Nothing to change, or a bad cron expression"}},
    dependencies=[security.ADMIN],
)
def patch_schedule(schedule_id: uuid.UUID, body: SchedulePatch, services: AppServicesDep) -> Response:
    changes = body.model_dump(exclude_unset=True)
    if changes.get("deadline_at") is not None:
        changes["deadline_at"] = as_moment(changes["deadline_at"])
    return json_response(document(services.schedules.update(schedule_id, changes)))


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, dependencies=[security.ADMIN])
def delete_schedule(schedule_id: uuid.UUID, services: AppServicesDep) -> Response:
    """204 whether or not the schedule existed (as OpenKAT answers)."""
    services.schedules.delete(schedule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
