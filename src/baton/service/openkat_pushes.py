"""OpenKAT's rules for a push (`POST /schedulers/{scheduler}/push`), from its web UI (a manual run) or
its runners (a popped task handed back on shutdown).

- `{scheduler}` is OpenKAT's scheduler id, a task type across organisations, or one queue id such as
  `boefje-acme`; a body that names another scheduler, type or organisation contradicts it (400).
- `data` must be the type's OpenKAT job (else 400 "malformed item"). Boefje and normalizer jobs carry
  the task's id as `data.id`: a push whose `id` differs from `data.id` gets a fresh id for both.
- The hash is OpenKAT's, derived from the job unless given; a task whose hash is queued already is a
  duplicate (`DuplicateTaskError`: the API answers OpenKAT's 409 with `Retry-After`).
- A push of a task a runner holds (its `id` dispatched or running) hands it back: queued again, same
  id. Found without asking first: the push itself meets the id (one statement for every other push).
- A boefje task gets its rescan schedule with it, in the same statement (QueueService.push_job).
- OpenKAT announces no organisations: with BATON_AUTO_ORGANISATIONS an unknown one is created on its
  first push.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from baton.core.errors import (
    ConflictError,
    ContradictoryInputError,
    DuplicateTaskError,
    NotFoundError,
    TaskIdTakenError,
)
from baton.core.jobs import Job, carries_its_task_id, job_document, job_hash, job_of
from baton.core.model import SchedulerType, TaskStatus, queue_type, scheduler_id_for
from baton.core.queueing import PushRequest, PushResult
from baton.service.queues import QueueService

SCHEDULER_TYPES = frozenset(kind.value for kind in SchedulerType)


@dataclass(frozen=True)
class OpenKatPush:
    """A task as OpenKAT's clients push it: rocky's `TaskPush`, or a runner's whole popped task
    (server-owned fields such as status and timestamps are not read)."""

    scheduler: str  # the path's scheduler id
    organisation: str
    data: dict[str, Any]
    id: uuid.UUID | None = None
    scheduler_id: str | None = None
    schedule_id: str | None = None
    priority: int | None = 1
    type: SchedulerType | None = None
    hash: str | None = None


def push_queue(push: OpenKatPush) -> tuple[str, SchedulerType]:
    """The queue a push goes to and its type; refused when the body contradicts the path."""
    if push.scheduler_id is not None and push.scheduler_id != push.scheduler:
        raise ContradictoryInputError(f"scheduler_id: '{push.scheduler_id}' does not match the path '{push.scheduler}'")
    if push.scheduler in SCHEDULER_TYPES:
        kind = SchedulerType(push.scheduler)
        if push.type is not None and push.type is not kind:
            raise ContradictoryInputError(f"type: '{push.type.value}' does not match '{push.scheduler}'")
        return scheduler_id_for(kind, push.organisation), kind
    found = queue_type(push.scheduler)
    if found is None:
        raise NotFoundError(f"scheduler '{push.scheduler}' not found")
    organisation = push.scheduler.partition("-")[2]
    if organisation != push.organisation:
        raise ContradictoryInputError(
            f"organisation: '{push.organisation}' does not match the scheduler '{push.scheduler}'"
        )
    return push.scheduler, found


async def push_task(queues: QueueService, push: OpenKatPush) -> dict[str, Any]:
    """The task pushed, or handed back (see the module). Raises DuplicateTaskError for a duplicate."""
    queue, kind = push_queue(push)
    job = job_of(kind, push.data)
    task_id = push.id or uuid.uuid4()
    data = push.data
    if carries_its_task_id(kind):
        if job.id != task_id:  # type: ignore[attr-defined]
            task_id = uuid.uuid4()  # OpenKAT's rule: the task and its job get one fresh id
            if push.id is not None and (held := await queues.held(push.id)) is not None:
                return await hand_back(queues, held, queue)
        job.id = task_id  # type: ignore[attr-defined]
        data = job_document(job)
    request = PushRequest(
        queue=queue,
        priority=push.priority if push.priority is not None else 1,
        data=data,
        hash=push.hash or job_hash(job),
        schedule_id=push.schedule_id,
        task_id=task_id,
        on_duplicate="refuse",
    )
    try:
        result = await push_creating_organisation(queues, request, job, push.organisation)
    except TaskIdTakenError:
        held = await queues.held(task_id)
        if held is None:
            raise
        return await hand_back(queues, held, queue)
    return result.task


async def push_creating_organisation(
    queues: QueueService, request: PushRequest, job: Job, organisation: str
) -> PushResult:
    """OpenKAT announces no organisations: with BATON_AUTO_ORGANISATIONS an unknown one is created on
    its first push."""
    try:
        return await queues.push_job(request, job)
    except NotFoundError:
        if not await queues.adopt_organisation(organisation):
            raise
    return await queues.push_job(request, job)


async def hand_back(queues: QueueService, held: dict[str, Any], queue: str) -> dict[str, Any]:
    """A runner gives back a task it popped: queued again, same id. Anything else with that id is a
    conflict: queued already (OpenKAT's duplicate) or finished (its id is taken)."""
    if held["scheduler_id"] != queue:
        raise ContradictoryInputError(f"id: task '{held['id']}' belongs to '{held['scheduler_id']}', not '{queue}'")
    state = TaskStatus(held["status"])
    if state is TaskStatus.QUEUED:
        raise DuplicateTaskError(f"task '{held['id']}' is queued already")
    if state not in (TaskStatus.DISPATCHED, TaskStatus.RUNNING):
        raise ConflictError(f"task '{held['id']}' exists already and is {state.value}")
    return await queues.change_status(held["id"], TaskStatus.QUEUED)
