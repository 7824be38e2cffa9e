"""Schedules in OpenKAT's shape, for its web UI: when to create a boefje or report task again.

A schedule has a cron expression (`schedule`) or a one-off `deadline_at` (or both), and the job to
queue as `data`; its hash is the job's (OpenKAT's formula) and unique. The boefje and report
schedulers queue due schedules; cron schedules get their next deadline, one-off ones none.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from baton.api import routing, security
from baton.api.deps import Responses, SettingsDep, StoreDep
from baton.api.openkat import job_of
from baton.api.pages import page
from baton.api.responses import json_response
from baton.api.schemas import MAX_LIST_LIMIT, MAX_OFFSET, ErrorOut, Moment, PopIn, dump_filters
from baton.api.tasks import as_moment
from baton.core.cron import is_valid_cron, next_cron_run
from baton.core.errors import ConflictError, ContradictoryInputError
from baton.core.filters import SCHEDULE_COLUMNS, parse_filters
from baton.core.jobs import OpenKatOrganisation, job_hash
from baton.core.model import SchedulerType, utcnow
from baton.storage import schedules as rows
from baton.storage.filters import SCHEDULES, compile_tree
from baton.storage.organisations import adopt_organisation
from baton.storage.tables import Schedule

router = routing.router(prefix="/schedules", tags=["openkat-compatible"])
SCHEDULER_TYPES = {kind.value for kind in SchedulerType}


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


def document(row: Schedule) -> dict[str, Any]:
    return ScheduleOut.model_validate(row, from_attributes=True).model_dump(mode="json")


def check_cron(expression: str | None) -> None:
    if expression is not None and not is_valid_cron(expression):
        raise ContradictoryInputError(f"Invalid cron expression: {expression}")


def conflict(schedule_hash: str) -> JSONResponse:
    message = f"Conflict error occurred: schedule with the same hash already exists: {schedule_hash}"
    return JSONResponse({"detail": message, "message": message}, status_code=409, headers={"Retry-After": "60"})


Limit = Annotated[int, Query(ge=0, le=MAX_LIST_LIMIT)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


@router.get("", response_model=ScheduleList, dependencies=[security.READ])
def list_schedules(
    request: Request,
    store: StoreDep,
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
    conditions: list[Any] = []
    equal: list[tuple[Any, Any]] = [
        (Schedule.scheduler_id, scheduler_id),
        (Schedule.organisation, organisation),
        (Schedule.hash, schedule_hash),
        (Schedule.enabled, enabled),
    ]
    for column, value in equal:
        if value is not None:
            conditions.append(column == value)
    ranges: list[tuple[Any, Moment | None, Moment | None, str]] = [
        (Schedule.deadline_at, min_deadline_at, max_deadline_at, "deadline_at"),
        (Schedule.created_at, min_created_at, max_created_at, "created_at"),
    ]
    for column, low, high, name in ranges:
        if low is not None and high is not None and as_moment(low) > as_moment(high):
            raise ContradictoryInputError(f"min_{name} must be less than max_{name}")
        if low is not None:
            conditions.append(column >= as_moment(low))
        if high is not None:
            conditions.append(column <= as_moment(high))
    return schedules_page(request, store, conditions, limit, offset)


def schedules_page(request: Request, store: StoreDep, conditions: list[Any], limit: int, offset: int) -> Response:
    with store.session() as session:
        count, found = rows.list_schedules(session, conditions=conditions, limit=limit, offset=offset)
        return json_response(page(request, count, limit, offset, [document(row) for row in found]))


@router.post("/search", response_model=ScheduleList, dependencies=[security.READ])
def search_schedules(request: Request, store: StoreDep, body: PopIn, limit: Limit = 10, offset: Offset = 0) -> Response:
    """Schedules matching a filter body (`{"filters": ...}`, the filter language over schedule columns)."""
    conditions: list[Any] = []
    if body.filters is not None:
        tree = parse_filters(dump_filters(body.filters), columns=SCHEDULE_COLUMNS)
        conditions.append(compile_tree(tree, store.dialect, SCHEDULES))
    return schedules_page(request, store, conditions, limit, offset)


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
async def create_schedule(body: ScheduleCreate, store: StoreDep, settings: SettingsDep) -> Response:
    if body.deadline_at is None and body.schedule is None:
        raise ContradictoryInputError("Either deadline_at or schedule must be provided")
    check_cron(body.schedule)
    if body.scheduler_id not in SCHEDULER_TYPES:
        raise ContradictoryInputError(f"Scheduler {body.scheduler_id} not found")
    kind = SchedulerType(body.scheduler_id)
    job = job_of(kind, body.data)
    schedule_hash = job_hash(job)
    deadline = as_moment(body.deadline_at) if body.deadline_at is not None else None
    if deadline is None and body.schedule is not None:
        deadline = next_cron_run(body.schedule, utcnow())

    def work() -> dict[str, Any]:
        with store.session() as session:
            adopt_organisation(
                session, body.organisation, auto=settings.auto_organisations, maxsize=settings.queue_maxsize
            )
            row = rows.create_schedule(
                session,
                scheduler_id=kind.value,
                organisation=body.organisation,
                data=body.data,
                schedule=body.schedule,
                deadline_at=deadline,
                schedule_hash=schedule_hash,
            )
            return document(row)

    try:
        created = await asyncio.to_thread(work)
    except ConflictError:
        return conflict(schedule_hash)
    return json_response(created, status.HTTP_201_CREATED)


UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown schedule"}}


@router.get("/{schedule_id}", response_model=ScheduleOut, responses=UNKNOWN, dependencies=[security.READ])
def get_schedule(schedule_id: uuid.UUID, store: StoreDep) -> Response:
    with store.session() as session:
        return json_response(document(rows.get_schedule(session, schedule_id)))


@router.patch(
    "/{schedule_id}",
    response_model=ScheduleOut,
    responses={**UNKNOWN, 400: {"model": ErrorOut, "description": "Nothing to change, or a bad cron expression"}},
    dependencies=[security.ADMIN],
)
def patch_schedule(schedule_id: uuid.UUID, body: SchedulePatch, store: StoreDep) -> Response:
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise ContradictoryInputError("no data to patch")
    check_cron(changes.get("schedule"))
    if changes.get("deadline_at") is not None:
        changes["deadline_at"] = as_moment(changes["deadline_at"])
    with store.session() as session:
        return json_response(document(rows.update_schedule(session, schedule_id, changes)))


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, dependencies=[security.ADMIN])
def delete_schedule(schedule_id: uuid.UUID, store: StoreDep) -> Response:
    """204 whether or not the schedule existed (as OpenKAT answers)."""
    with store.session() as session:
        rows.delete_schedule(session, schedule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
