"""Drop-in endpoints for OpenKAT's boefje and normalizer runners (same store, same guarantees).

`{scheduler}` is a scheduler type (`boefje`, `normalizer`, `report`: across all organisations, as
OpenKAT's runners use it) or one queue id such as `boefje-acme`.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field

from baton import queue
from baton.api.deps import MetricsDep, Responses, SettingsDep, StoreDep
from baton.api.queues import check_data_size
from baton.filters import compile_filters
from baton.models import SchedulerType, scheduler_id_for
from baton.schemas import (
    MAX_LIST_LIMIT,
    ErrorOut,
    FilterSpec,
    OrganisationId,
    PopResults,
    Priority,
    TaskHash,
    TaskOut,
    dump_filters,
)
from baton.store import NotFoundError, get_scheduler

router = APIRouter(prefix="/schedulers", tags=["openkat-compatible"])
ERRORS: Responses = {
    400: {"model": ErrorOut, "description": "Body contradicts the path"},
    404: {"model": ErrorOut, "description": "Unknown scheduler"},
}
SCHEDULER_TYPES = {kind.value for kind in SchedulerType}


class CompatPopIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filters: FilterSpec | None = None


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


def _pop_target(scheduler: str) -> dict[str, str]:
    return {"task_type": scheduler} if scheduler in SCHEDULER_TYPES else {"scheduler_id": scheduler}


@router.post("/{scheduler}/pop", responses=ERRORS)
def pop_many(
    scheduler: str,
    store: StoreDep,
    metrics: MetricsDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 1,
    body: CompatPopIn | None = None,
) -> PopResults:
    """Pop up to `limit` tasks, best priority first, each handed out once; `{"results": []}` when empty."""
    target = _pop_target(scheduler)
    started = time.perf_counter()
    with store.session() as session:
        condition = compile_filters(dump_filters(body.filters) if body else None, store.dialect)
        popped = queue.pop(session, limit=limit, condition=condition, **target)
        if not popped and "scheduler_id" in target:
            get_scheduler(session, scheduler)  # an empty queue answers [], an unknown one 404
        results = [TaskOut.model_validate(task) for task in popped]
    metrics.pop_latency.observe(time.perf_counter() - started)
    for task in results:
        metrics.pops.labels(task.scheduler_id).inc()
    return PopResults(results=results)


def _resolve_push_queue(path_id: str, body: CompatPushIn) -> str:
    if body.scheduler_id is not None and body.scheduler_id != path_id:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"scheduler_id: '{body.scheduler_id}' does not match the path '{path_id}'"
        )
    if path_id in SCHEDULER_TYPES:
        if body.type is not None and body.type.value != path_id:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"type: '{body.type.value}' does not match '{path_id}'")
        return scheduler_id_for(path_id, body.organisation)
    kind, _, organisation = path_id.partition("-")
    if kind not in SCHEDULER_TYPES:
        raise NotFoundError(f"scheduler '{path_id}' not found")
    if organisation != body.organisation:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST,
            f"organisation: '{body.organisation}' does not match the scheduler '{path_id}'",
        )
    return path_id


@router.post(
    "/{scheduler}/push",
    status_code=status.HTTP_201_CREATED,
    responses={**ERRORS, 409: {"model": ErrorOut, "description": "Task id in use"}, 429: {"model": ErrorOut}},
)
def push_one(
    scheduler: str, body: CompatPushIn, store: StoreDep, settings: SettingsDep, metrics: MetricsDep
) -> TaskOut:
    """Push one task; with a `hash` still queued, that task gets the new priority instead (also 201)."""
    check_data_size(body.data, settings.max_data_bytes)
    queue_id = _resolve_push_queue(scheduler, body)
    with store.session() as session:
        result = queue.push(
            session,
            queue_id,
            priority=body.priority if body.priority is not None else 1,
            data=body.data,
            task_hash=body.hash,
            schedule_id=body.schedule_id,
            task_id=body.id,
        )
        task = TaskOut.model_validate(result.task)
    metrics.pushes.labels(queue_id, "created" if result.created else "deduplicated").inc()
    return task
