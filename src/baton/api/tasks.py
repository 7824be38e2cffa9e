"""Tasks: listing, reading and moving along the lifecycle."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from baton import queue
from baton.api.deps import Responses, StoreDep
from baton.models import SchedulerType, TaskStatus
from baton.schemas import MAX_LIST_LIMIT, MAX_OFFSET, ErrorOut, TaskList, TaskOut, TaskPatch

router = APIRouter(prefix="/tasks", tags=["tasks"])
UNKNOWN_TASK: Responses = {404: {"model": ErrorOut, "description": "Unknown task"}}


@router.get("")
def list_tasks(
    store: StoreDep,
    scheduler_id: str | None = None,
    status: TaskStatus | None = None,
    organisation: str | None = None,
    type: SchedulerType | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> TaskList:
    with store.session() as session:
        count, rows = queue.list_tasks(
            session,
            scheduler_id=scheduler_id,
            status=status,
            organisation=organisation,
            task_type=type.value if type else None,
            limit=limit,
            offset=offset,
        )
        return TaskList(count=count, results=[TaskOut.model_validate(row) for row in rows])


@router.get("/{task_id}", responses=UNKNOWN_TASK)
def get_task(task_id: uuid.UUID, store: StoreDep) -> TaskOut:
    with store.session() as session:
        return TaskOut.model_validate(queue.get_task(session, task_id))


@router.patch(
    "/{task_id}",
    responses={**UNKNOWN_TASK, 409: {"model": ErrorOut, "description": "Illegal status transition"}},
)
def patch_task(task_id: uuid.UUID, body: TaskPatch, store: StoreDep) -> TaskOut:
    with store.session() as session:
        return TaskOut.model_validate(queue.change_status(session, task_id, body.status))
