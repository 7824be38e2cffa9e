"""OpenKAT's dialect, for its runners and web UI: `/schedulers/{scheduler}/pop|push`.

`{scheduler}` is OpenKAT's scheduler id, a task type (`boefje`, `normalizer`, `report`), across all
organisations; one queue id such as `boefje-acme` works too. The same queue service as Baton's own
dialect; this module only translates paths, bodies and answers:

- answers carry OpenKAT's task shape (`scheduler_id` = the type, `organisation` a field);
- a push's `data` must be the type's OpenKAT job (else 400 "malformed item"); boefje and normalizer
  jobs carry the task's id as `data.id` (a push whose `id` differs from `data.id` gets a fresh id for
  both, as OpenKAT's scheduler does); the hash is OpenKAT's, derived from the job when not given;
- a push of a task that is queued already (same hash) answers 409 with OpenKAT's body and
  `Retry-After: 60`; a push of a task a runner holds (its `id` dispatched or running) hands it back:
  it is queued again (OpenKAT's runners do this on shutdown);
- bodies without a Content-Type header are read as JSON.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from baton.api import routing, security
from baton.api.deps import QueuesDep, Responses
from baton.api.longpoll import TOO_MANY_WAITERS, Wait, pop_for
from baton.api.responses import json_response, openkat_task_document, tasks_response
from baton.api.schemas import (
    MAX_LIST_LIMIT,
    ErrorOut,
    PopIn,
    PopResults,
    Priority,
    TaskHash,
    TaskOut,
    filter_tree,
)
from baton.core.errors import ContradictoryInputError, DuplicateTaskError, NotFoundError
from baton.core.jobs import OpenKatOrganisation, carries_its_task_id, job_document, job_hash, job_of
from baton.core.model import SchedulerType, TaskStatus, scheduler_id_for
from baton.core.queueing import PopTarget, PushRequest, PushResult
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
) -> Response:
    """Pop up to `limit` tasks, best priority first (fair across organisations among equals), each
    handed out once; `{"results": []}` when empty. With `wait`, an empty answer waits until a task is
    queued or the time is up (long-poll; whatever is queued then, up to `limit`, is the answer)."""
    tree = filter_tree(body.filters) if body else None
    return tasks_response(await pop_for(request, queues, pop_target(queues, scheduler), limit, tree, wait))


def resolve_push_queue(path_id: str, body: CompatPushIn) -> tuple[str, SchedulerType]:
    if body.scheduler_id is not None and body.scheduler_id != path_id:
        raise ContradictoryInputError(f"scheduler_id: '{body.scheduler_id}' does not match the path '{path_id}'")
    if path_id in SCHEDULER_TYPES:
        if body.type is not None and body.type.value != path_id:
            raise ContradictoryInputError(f"type: '{body.type.value}' does not match '{path_id}'")
        return scheduler_id_for(path_id, body.organisation), SchedulerType(path_id)
    kind, _, organisation = path_id.partition("-")
    if kind not in SCHEDULER_TYPES:
        raise NotFoundError(f"scheduler '{path_id}' not found")
    if organisation != body.organisation:
        raise ContradictoryInputError(f"organisation: '{body.organisation}' does not match the scheduler '{path_id}'")
    return path_id, SchedulerType(kind)


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
    """Push one task (OpenKAT's rules, see the module's description); 201 with the task."""
    queue, kind = resolve_push_queue(scheduler, body)
    job = job_of(kind, body.data)
    if body.id is not None:
        held = await queues.find(body.id)
        if held is not None:
            return await hand_back(queues, held, queue)
    task_id = body.id or uuid.uuid4()
    data = body.data
    if carries_its_task_id(kind):
        if job.id != task_id:  # type: ignore[attr-defined]
            task_id = uuid.uuid4()  # OpenKAT's rule: the task and its job get one fresh id
        job.id = task_id  # type: ignore[attr-defined]
        data = job_document(job)
    request = PushRequest(
        queue=queue,
        priority=body.priority if body.priority is not None else 1,
        data=data,
        hash=body.hash or job_hash(job),
        schedule_id=body.schedule_id,
        task_id=task_id,
        on_duplicate="refuse",
    )
    try:
        result = await push_creating_organisation(queues, request, body.organisation)
    except DuplicateTaskError:
        return duplicate_answer()
    if kind is SchedulerType.BOEFJE:
        await queues.keep_schedule(request, result.task)
    return json_response(openkat_task_document(result.task), status.HTTP_201_CREATED)


async def push_creating_organisation(queues: QueueService, request: PushRequest, organisation: str) -> PushResult:
    """OpenKAT announces no organisations: with BATON_AUTO_ORGANISATIONS an unknown one is created on
    its first push."""
    try:
        return await queues.push(request)
    except NotFoundError:
        if not await queues.adopt_organisation(organisation):
            raise
    return await queues.push(request)


async def hand_back(queues: QueueService, held: dict[str, Any], queue: str) -> Response:
    """A runner gives back a task it popped: queued again, same id. Anything else with that id is a
    conflict: queued already (OpenKAT's duplicate answer) or finished (its id is taken)."""
    if held["scheduler_id"] != queue:
        raise ContradictoryInputError(f"id: task '{held['id']}' belongs to '{held['scheduler_id']}', not '{queue}'")
    state = TaskStatus(held["status"])
    if state is TaskStatus.QUEUED:
        return duplicate_answer()
    if state not in (TaskStatus.DISPATCHED, TaskStatus.RUNNING):
        raise DuplicateTaskError(f"task '{held['id']}' exists already and is {state.value}")
    try:
        task = await queues.change_status(held["id"], TaskStatus.QUEUED)
    except DuplicateTaskError:
        return duplicate_answer()
    return json_response(openkat_task_document(task), status.HTTP_201_CREATED)
