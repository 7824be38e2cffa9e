"""Tasks: listing, reading and moving along the lifecycle."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Query, Response

from baton.api import routing, security
from baton.api.deps import QueuesDep, Responses, StoreDep
from baton.api.responses import json_response, task_document
from baton.api.schemas import MAX_LIST_LIMIT, MAX_OFFSET, ErrorOut, TaskList, TaskOut, TaskPatch
from baton.core.model import SchedulerType, TaskStatus
from baton.storage import tasks as task_rows
from baton.storage.tables import Task

router = routing.router(prefix="/tasks", tags=["tasks"])
UNKNOWN_TASK: Responses = {404: {"model": ErrorOut, "description": "Unknown task"}}


@router.get("", dependencies=[security.READ])
def list_tasks(
    store: StoreDep,
    scheduler_id: str | None = None,
    status: TaskStatus | None = None,
    organisation: str | None = None,
    type: SchedulerType | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> TaskList:
    conditions = []
    if scheduler_id is not None:
        conditions.append(Task.scheduler_id == scheduler_id)
    if status is not None:
        conditions.append(Task.status == status.value)
    if organisation is not None:
        conditions.append(Task.organisation == organisation)
    if type is not None:
        conditions.append(Task.type == type.value)
    with store.session() as session:
        count, rows = task_rows.list_tasks(session, conditions=conditions, limit=limit, offset=offset)
        return TaskList(count=count, results=[TaskOut.model_validate(row) for row in rows])


@router.get("/{task_id}", responses=UNKNOWN_TASK, dependencies=[security.READ])
def get_task(task_id: uuid.UUID, store: StoreDep) -> TaskOut:
    with store.session() as session:
        return TaskOut.model_validate(task_rows.get_task(session, task_id))


@router.patch(
    "/{task_id}",
    response_model=TaskOut,
    responses={**UNKNOWN_TASK, 409: {"model": ErrorOut, "description": "Illegal status transition"}},
    dependencies=[security.POP],
)
async def patch_task(task_id: uuid.UUID, body: TaskPatch, queues: QueuesDep) -> Response:
    return json_response(task_document(await queues.change_status(task_id, body.status)))
