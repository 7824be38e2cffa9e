"""Tasks: listing (in OpenKAT's page shape, with its query parameters), reading, statistics, and moving
a task along its lifecycle. Answers carry OpenKAT's `scheduler_id` (the task type) and Baton's
`queue` (the queue id)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Annotated, Any, Literal, get_args

from fastapi import Depends, Query, Request, Response
from sqlalchemy import false

from baton.api import routing, security
from baton.api.deps import QueuesDep, Responses, StoreDep
from baton.api.pages import page
from baton.api.responses import json_response, openkat_task_document
from baton.api.schemas import (
    IGNORES_UNKNOWN_QUERY_PARAMETERS,
    MAX_LIST_LIMIT,
    MAX_OFFSET,
    ErrorOut,
    Moment,
    PopIn,
    TaskList,
    TaskOut,
    TaskPatch,
    filter_tree,
)
from baton.core.errors import ContradictoryInputError
from baton.core.filters import Condition, Group
from baton.core.model import SchedulerType, TaskStatus, utcnow
from baton.storage import tasks as task_rows
from baton.storage.engine import Store
from baton.storage.filters import compile_tree
from baton.storage.tables import Task

router = routing.router(prefix="/tasks", tags=["tasks"])
UNKNOWN_TASK: Responses = {404: {"model": ErrorOut, "description": "Unknown task"}}
SCHEDULER_TYPES = {kind.value for kind in SchedulerType}
STATS_ORDER = ("pending", *(status.value for status in TaskStatus))
# The statuses a listing filters on: OpenKAT's seven, `pending` among them (its web UI offers it;
# Baton never gives a task that status, so it matches nothing).
ListedStatus = Literal["pending", "queued", "dispatched", "running", "completed", "failed", "cancelled"]
assert set(get_args(ListedStatus)) == {"pending", *TaskStatus}
LENIENT = {IGNORES_UNKNOWN_QUERY_PARAMETERS: True}


def as_moment(value: Moment) -> datetime:
    """A date means its midnight; a time without a zone is UTC (as OpenKAT reads them)."""
    moment = value if isinstance(value, datetime) else datetime.combine(value, time.min)
    return moment if moment.tzinfo else moment.replace(tzinfo=utcnow().tzinfo)


@dataclass(frozen=True)
class TaskQuery:
    """The listing's filters, as OpenKAT's web UI and Baton's clients send them."""

    scheduler_id: str | None = None
    organisation: str | None = None
    status: ListedStatus | None = None
    task_type: SchedulerType | None = None
    min_created_at: Moment | None = None
    max_created_at: Moment | None = None
    input_ooi: str | None = None
    plugin_id: str | None = None

    def conditions(self, dialect: str) -> list[Any]:
        conditions: list[Any] = []
        if self.scheduler_id is not None:  # OpenKAT's scheduler id is a type; Baton's is a queue id
            column = Task.type if self.scheduler_id in SCHEDULER_TYPES else Task.scheduler_id
            conditions.append(column == self.scheduler_id)
        if self.organisation is not None:
            conditions.append(Task.organisation == self.organisation)
        if self.status == "pending":
            conditions.append(false())
        elif self.status is not None:
            conditions.append(Task.status == self.status)
        if self.task_type is not None:
            conditions.append(Task.type == self.task_type.value)
        earliest = as_moment(self.min_created_at) if self.min_created_at is not None else None
        latest = as_moment(self.max_created_at) if self.max_created_at is not None else None
        if earliest is not None and latest is not None and earliest > latest:
            raise ContradictoryInputError("min_created_at must be less than max_created_at")
        if earliest is not None:
            conditions.append(Task.created_at >= earliest)
        if latest is not None:
            conditions.append(Task.created_at <= latest)
        if self.input_ooi is not None:
            conditions.append(compile_tree(Condition("data", ("input_ooi",), "eq", self.input_ooi), dialect))
        if self.plugin_id is not None:
            either = Group(
                "or",
                (
                    Condition("data", ("boefje", "id"), "eq", self.plugin_id),
                    Condition("data", ("normalizer", "id"), "eq", self.plugin_id),
                ),
            )
            conditions.append(compile_tree(either, dialect))
        return conditions


Ignored = Annotated[str | None, Query(description="Sent by OpenKAT's web UI; ignored (as is any unknown parameter).")]


def task_query(
    scheduler_id: Annotated[str | None, Query(description="A type (OpenKAT's id) or a queue id.")] = None,
    organisation: str | None = None,
    status: ListedStatus | None = None,
    type: SchedulerType | None = None,
    task_type: Annotated[SchedulerType | None, Query(description="The same as `type`.")] = None,
    min_created_at: Moment | None = None,
    max_created_at: Moment | None = None,
    input_ooi: Annotated[str | None, Query(max_length=512, description="`data.input_ooi` equals this.")] = None,
    plugin_id: Annotated[str | None, Query(max_length=128, description="The boefje's or normalizer's id.")] = None,
    observed_at: Ignored = None,
    ooi_id: Ignored = None,
) -> TaskQuery:
    return TaskQuery(
        scheduler_id, organisation, status, type or task_type, min_created_at, max_created_at, input_ooi, plugin_id
    )


TaskQueryDep = Annotated[TaskQuery, Depends(task_query)]
Limit = Annotated[int, Query(ge=0, le=MAX_LIST_LIMIT, description="0: only `count`.")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


def list_page(request: Request, store: Store, conditions: list[Any], limit: int, offset: int) -> dict[str, Any]:
    with store.session() as session:
        count, rows = task_rows.list_tasks(session, conditions=conditions, limit=limit, offset=offset)
        results = [openkat_task_document(task_rows.record(row)) for row in rows]
    return page(request, count, limit, offset, results)


@router.get("", response_model=TaskList, dependencies=[security.READ], openapi_extra=LENIENT)
def list_tasks(
    request: Request, store: StoreDep, query: TaskQueryDep, limit: Limit = 100, offset: Offset = 0
) -> Response:
    """Tasks, newest first, with OpenKAT's page shape and query parameters; unknown query parameters
    are ignored (OpenKAT's web UI passes its own page's along, e.g. `page`)."""
    return json_response(list_page(request, store, query.conditions(store.dialect), limit, offset))


@router.post("", response_model=TaskList, dependencies=[security.READ], openapi_extra=LENIENT)
def search_tasks(
    request: Request,
    store: StoreDep,
    query: TaskQueryDep,
    body: PopIn | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Response:
    """The listing with a filter body (`{"filters": ...}`, the pop filter language), as OpenKAT's web UI
    calls it."""
    conditions = query.conditions(store.dialect)
    tree = filter_tree(body.filters) if body else None
    if tree is not None:
        conditions.append(compile_tree(tree, store.dialect))
    return json_response(list_page(request, store, conditions, limit, offset))


@router.get("/stats", dependencies=[security.READ])
def stats(
    store: StoreDep,
    scheduler_id: Annotated[str | None, Query(description="A type (OpenKAT's id) or a queue id.")] = None,
    organisation_id: str | None = None,
) -> Response:
    """Tasks per hour of their last change over the past 24 hours, per status (OpenKAT's shape: hours
    newest first, `pending` always 0 in Baton, `total` per hour)."""
    conditions = TaskQuery(scheduler_id=scheduler_id, organisation=organisation_id).conditions(store.dialect)
    since = utcnow() - timedelta(hours=24)
    with store.session() as session:
        counts = task_rows.hourly_counts(session, since, conditions)
    hours: dict[datetime, dict[str, int]] = {}
    for hour, status, number in counts:
        bucket = hours.setdefault(hour, dict.fromkeys(STATS_ORDER, 0))
        bucket[status] = bucket.get(status, 0) + number
    document = {}
    for hour in sorted(hours, reverse=True):
        bucket = hours[hour]
        bucket["total"] = sum(bucket.values())
        document[hour.isoformat()] = bucket
    return json_response(document)


@router.get("/{task_id}", response_model=TaskOut, responses=UNKNOWN_TASK, dependencies=[security.READ])
def get_task(task_id: uuid.UUID, store: StoreDep) -> Response:
    with store.session() as session:
        return json_response(openkat_task_document(task_rows.record(task_rows.get_task(session, task_id))))


@router.patch(
    "/{task_id}",
    response_model=TaskOut,
    responses={**UNKNOWN_TASK, 409: {"model": ErrorOut, "description": "Illegal status transition"}},
    dependencies=[security.POP],
)
async def patch_task(task_id: uuid.UUID, body: TaskPatch, queues: QueuesDep) -> Response:
    """Move a task along its lifecycle: queued → dispatched (pop) → running → completed | failed;
    dispatched or running back to queued (handed back); cancelled from queued or dispatched."""
    return json_response(openkat_task_document(await queues.change_status(task_id, body.status)))
