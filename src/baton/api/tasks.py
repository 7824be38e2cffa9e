"""Tasks: listing (in OpenKAT's page shape, with its query parameters), reading, statistics, and moving
a task along its lifecycle. Answers carry OpenKAT's `scheduler_id` (the task type) and Baton's
`queue` (the queue id)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Response

from baton.api import routing, security
from baton.api.deps import AppServicesDep, QueuesDep, Responses
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
from baton.core.filters import FilterTree
from baton.core.model import SchedulerType
from baton.core.task_queries import ListedStatus, TaskQuery
from baton.core.task_queries import as_moment as as_moment  # api/schedules.py reads dates as the listing does
from baton.service.tasks import TaskListing

router = routing.router(prefix="/tasks", tags=["tasks"])
UNKNOWN_TASK: Responses = {404: {"model": ErrorOut, "description": "Unknown task"}}
LENIENT = {IGNORES_UNKNOWN_QUERY_PARAMETERS: True}


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


def list_page(
    request: Request, listing: TaskListing, limit: int, offset: int, tree: FilterTree | None = None
) -> dict[str, Any]:
    count, records = listing.page(limit, offset, tree)
    return page(request, count, limit, offset, [openkat_task_document(record) for record in records])


@router.get("", response_model=TaskList, dependencies=[security.READ], openapi_extra=LENIENT)
def list_tasks(
    request: Request, services: AppServicesDep, query: TaskQueryDep, limit: Limit = 100, offset: Offset = 0
) -> Response:
    """Tasks, newest first, with OpenKAT's page shape and query parameters; unknown query parameters
    are ignored (OpenKAT's web UI passes its own page's along, e.g. `page`)."""
    return json_response(list_page(request, services.tasks.listing(query), limit, offset))


@router.post("", response_model=TaskList, dependencies=[security.READ], openapi_extra=LENIENT)
def search_tasks(
    request: Request,
    services: AppServicesDep,
    query: TaskQueryDep,
    body: PopIn | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Response:
    """The listing with a filter body (`{"filters": ...}`, the pop filter language), as OpenKAT's web UI
    calls it."""
    listing = services.tasks.listing(query)
    tree = filter_tree(body.filters) if body else None
    return json_response(list_page(request, listing, limit, offset, tree))


@router.get("/stats", dependencies=[security.READ])
def stats(
    services: AppServicesDep,
    scheduler_id: Annotated[str | None, Query(description="A type (OpenKAT's id) or a queue id.")] = None,
    organisation_id: str | None = None,
) -> Response:
    """Tasks per hour of their last change over the past 24 hours, per status (OpenKAT's shape: hours
    newest first, `pending` always 0 in Baton, `total` per hour)."""
    query = TaskQuery(scheduler_id=scheduler_id, organisation=organisation_id)
    return json_response(services.tasks.hourly_stats(query))


@router.get("/{task_id}", response_model=TaskOut, responses=UNKNOWN_TASK, dependencies=[security.READ])
async def get_task(task_id: uuid.UUID, queues: QueuesDep) -> Response:
    return json_response(openkat_task_document(await queues.task(task_id)))


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
