"""OpenKAT's dialect, for its boefje and normalizer runners: `/schedulers/{scheduler}/pop|push`.

`{scheduler}` is a scheduler type (`boefje`, `normalizer`, `report`: across all organisations, as
OpenKAT's runners use it) or one queue id such as `boefje-acme`. The same queue service as Baton's
own dialect; only paths and bodies are translated.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from baton.api import routing, security
from baton.api.deps import QueuesDep, Responses
from baton.api.responses import json_response, task_document, tasks_response
from baton.api.schemas import (
    MAX_LIST_LIMIT,
    ErrorOut,
    OrganisationId,
    PopIn,
    PopResults,
    Priority,
    TaskHash,
    TaskOut,
    filter_tree,
)
from baton.core.errors import ContradictoryInputError, NotFoundError
from baton.core.model import SchedulerType, scheduler_id_for
from baton.storage.queues import PushRequest
from baton.storage.statements import PopTarget

router = routing.router(prefix="/schedulers", tags=["openkat-compatible"])
ERRORS: Responses = {
    400: {"model": ErrorOut, "description": "Body contradicts the path"},
    404: {"model": ErrorOut, "description": "Unknown scheduler"},
}
SCHEDULER_TYPES = {kind.value for kind in SchedulerType}


class CompatPushIn(BaseModel):
    """A task as OpenKAT's runners send it; server-owned fields (status, timestamps) are ignored."""

    model_config = ConfigDict(extra="ignore")

    id: uuid.UUID | None = None
    scheduler_id: str | None = None
    schedule_id: str | None = Field(None, max_length=64)
    organisation: OrganisationId
    priority: Priority | None = 1
    type: SchedulerType | None = None
    hash: TaskHash | None = None
    data: dict[str, Any]


def pop_target(queues: Any, scheduler: str) -> PopTarget:
    if scheduler in SCHEDULER_TYPES:
        return queues.target(task_type=scheduler)  # type: ignore[no-any-return]
    return queues.target(queue=scheduler)  # type: ignore[no-any-return]


@router.post("/{scheduler}/pop", response_model=PopResults, responses=ERRORS, dependencies=[security.POP])
async def pop_many(
    scheduler: str,
    queues: QueuesDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 1,
    body: PopIn | None = None,
) -> Response:
    """Pop up to `limit` tasks, best priority first, each handed out once; `{"results": []}` when empty."""
    tasks = await queues.pop(pop_target(queues, scheduler), limit, filter_tree(body.filters) if body else None)
    return tasks_response(tasks)


def resolve_push_queue(path_id: str, body: CompatPushIn) -> str:
    if body.scheduler_id is not None and body.scheduler_id != path_id:
        raise ContradictoryInputError(f"scheduler_id: '{body.scheduler_id}' does not match the path '{path_id}'")
    if path_id in SCHEDULER_TYPES:
        if body.type is not None and body.type.value != path_id:
            raise ContradictoryInputError(f"type: '{body.type.value}' does not match '{path_id}'")
        return scheduler_id_for(path_id, body.organisation)
    kind, _, organisation = path_id.partition("-")
    if kind not in SCHEDULER_TYPES:
        raise NotFoundError(f"scheduler '{path_id}' not found")
    if organisation != body.organisation:
        raise ContradictoryInputError(f"organisation: '{body.organisation}' does not match the scheduler '{path_id}'")
    return path_id


@router.post(
    "/{scheduler}/push",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskOut,
    responses={**ERRORS, 409: {"model": ErrorOut, "description": "Task id in use"}, 429: {"model": ErrorOut}},
    dependencies=[security.PUSH],
)
async def push_one(scheduler: str, body: CompatPushIn, queues: QueuesDep) -> Response:
    """Push one task; with a `hash` still queued, that task gets the new priority instead (also 201)."""
    request = PushRequest(
        queue=resolve_push_queue(scheduler, body),
        priority=body.priority if body.priority is not None else 1,
        data=body.data,
        hash=body.hash,
        schedule_id=body.schedule_id,
        task_id=body.id,
    )
    result = await queues.push(request)
    return json_response(task_document(result.task), status.HTTP_201_CREATED)
