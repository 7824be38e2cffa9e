"""OpenKAT's dialect, for its runners and web UI: `/schedulers/{scheduler}/pop|push`.

`{scheduler}` is OpenKAT's scheduler id, a task type (`boefje`, `normalizer`, `report`), across all
organisations; one queue id such as `boefje-acme` works too. The same queue service as Baton's own
dialect, with OpenKAT's push rules (`service/openkat_pushes.py`); this module only translates paths,
bodies and answers: answers carry OpenKAT's task shape (`scheduler_id` = the type, `organisation` a
field); a duplicate push answers 409 with OpenKAT's body and `Retry-After: 60`; bodies without a
Content-Type header are read as JSON.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from baton.api import routing, security
from baton.api.deps import QueuesDep, Responses
from baton.api.longpoll import TOO_MANY_WAITERS, KeyHeader, Wait, client_leaving, pop_request
from baton.api.responses import json_response, openkat_task_document, tasks_response
from baton.api.schemas import (
    MAX_LIST_LIMIT,
    ErrorOut,
    PopIn,
    PopResults,
    Priority,
    TaskHash,
    TaskOut,
)
from baton.core.errors import DuplicateTaskError
from baton.core.jobs import OpenKatOrganisation
from baton.core.model import SchedulerType
from baton.core.queueing import PopTarget
from baton.service.openkat_pushes import OpenKatPush, push_task
from baton.service.queues import QueueService

router = routing.router(prefix="/schedulers", tags=["openkat-compatible"])
ERRORS: Responses = {
    400: {"model": ErrorOut, "description": "Body contradicts the path, or `data` is not the type's job"},
    404: {"model": ErrorOut, "description": "Unknown scheduler"},
}
SCHEDULER_TYPES = {kind.value for kind in SchedulerType}
DUPLICATE = "Conflict error occurred: queue is not allowed to push items"


class CompatPushIn(BaseModel):
    """A task as OpenKAT's clients send it: rocky sends `TaskPush`, the runners a whole popped task.
    Server-owned fields (status, timestamps) are ignored."""

    model_config = ConfigDict(extra="ignore")

    id: uuid.UUID | None = None
    scheduler_id: str | None = None
    schedule_id: str | None = Field(None, max_length=64)
    organisation: OpenKatOrganisation
    priority: Priority | None = 1
    type: SchedulerType | None = None
    hash: TaskHash | None = None
    data: dict[str, Any]


def pop_target(queues: QueueService, scheduler: str) -> PopTarget:
    if scheduler in SCHEDULER_TYPES:
        return queues.target(task_type=scheduler)
    return queues.target(queue=scheduler)


@router.post(
    "/{scheduler}/pop", response_model=PopResults, responses={**ERRORS, **TOO_MANY_WAITERS}, dependencies=[security.POP]
)
async def pop_many(
    request: Request,
    scheduler: str,
    queues: QueuesDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 1,
    body: PopIn | None = None,
    wait: Wait = 0,
    key_header: KeyHeader = None,
) -> Response:
    """Pop up to `limit` tasks, best priority first (fair across organisations among equals), each
    handed out once; `{"results": []}` when empty. With `wait`, an empty answer waits until a task is
    queued or the time is up (long-poll; whatever is queued then, up to `limit`, is the answer)."""
    pop = pop_request(queues.settings, pop_target(queues, scheduler), limit, body, wait, key_header)
    async with client_leaving(request, pop.wait) as gone:
        return tasks_response(await queues.pop(pop, gone))


def duplicate_answer() -> JSONResponse:
    return JSONResponse({"detail": DUPLICATE, "message": DUPLICATE}, status_code=409, headers={"Retry-After": "60"})


@router.post(
    "/{scheduler}/push",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskOut,
    responses={
        **ERRORS,
        409: {"model": ErrorOut, "description": "The same task is queued already (Retry-After: 60), or id in use"},
        429: {"model": ErrorOut, "description": "The queue is full"},
    },
    dependencies=[security.PUSH],
)
async def push_one(scheduler: str, body: CompatPushIn, queues: QueuesDep) -> Response:
    """Push one task as OpenKAT's scheduler takes it; 201 with the task. `data` must be the type's job;
    a task whose hash is queued already answers 409 (Retry-After: 60); a task a runner holds (its `id`
    dispatched or running) is handed back, queued again; a boefje task gets its rescan schedule."""
    answer = await push_answer(queues, scheduler, body)
    if answer is None:
        return duplicate_answer()
    return json_response(answer, status.HTTP_201_CREATED)


async def push_answer(queues: QueueService, scheduler: str, body: CompatPushIn) -> dict[str, Any] | None:
    """The push of the route and of the fast path (`fastpath.py`): the task's document (answered
    201), or None for a duplicate (answered by `duplicate_answer`)."""
    push = OpenKatPush(
        scheduler,
        body.organisation,
        body.data,
        body.id,
        body.scheduler_id,
        body.schedule_id,
        body.priority,
        body.type,
        body.hash,
    )
    try:
        task = await push_task(queues, push)
    except DuplicateTaskError:
        return None
    return openkat_task_document(task)
