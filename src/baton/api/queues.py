"""Queues: push and pop. A pop here is `baton.queue.pop` in one committed transaction."""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, HTTPException, Response, status

from baton import queue
from baton.api.deps import MetricsDep, Responses, SettingsDep, StoreDep
from baton.filters import compile_filters
from baton.models import Scheduler, SchedulerType
from baton.schemas import ErrorOut, PopIn, PushIn, QueueOut, TaskOut, dump_filters
from baton.store import get_scheduler, list_schedulers

router = APIRouter(prefix="/queues", tags=["queues"])
UNKNOWN_QUEUE: Responses = {404: {"model": ErrorOut, "description": "Unknown queue"}}


def _queue_out(row: Scheduler, size: int) -> QueueOut:
    return QueueOut(
        id=row.id,
        organisation=row.organisation,
        type=SchedulerType(row.type),
        size=size,
        maxsize=row.maxsize,
        enabled=row.enabled,
    )


def check_data_size(data: object, limit: int) -> None:
    size = len(json.dumps(data, separators=(",", ":")).encode())
    if size > limit:
        raise HTTPException(413, f"data: {size} bytes exceeds the limit of {limit} bytes")


@router.get("")
def list_queues(store: StoreDep) -> list[QueueOut]:
    with store.session() as session:
        sizes = queue.queue_sizes(session)
        return [_queue_out(row, sizes.get(row.id, 0)) for row in list_schedulers(session)]


@router.get("/{queue_id}", responses=UNKNOWN_QUEUE)
def get_queue(queue_id: str, store: StoreDep) -> QueueOut:
    with store.session() as session:
        row = get_scheduler(session, queue_id)
        return _queue_out(row, queue.queue_size(session, queue_id))


@router.post(
    "/{queue_id}/push",
    status_code=status.HTTP_201_CREATED,
    responses={
        **UNKNOWN_QUEUE,
        200: {"model": TaskOut, "description": "A queued task with this hash existed: its priority updated"},
        409: {"model": ErrorOut, "description": "The queue is disabled"},
        413: {"model": ErrorOut, "description": "`data` too large"},
        429: {"model": ErrorOut, "description": "The queue is full"},
    },
)
def push(
    queue_id: str,
    body: PushIn,
    response: Response,
    store: StoreDep,
    settings: SettingsDep,
    metrics: MetricsDep,
) -> TaskOut:
    check_data_size(body.data, settings.max_data_bytes)
    with store.session() as session:
        result = queue.push(
            session,
            queue_id,
            priority=body.priority,
            data=body.data,
            task_hash=body.hash,
            schedule_id=body.schedule_id,
        )
        task = TaskOut.model_validate(result.task)
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    metrics.pushes.labels(queue_id, "created" if result.created else "deduplicated").inc()
    return task


@router.post("/{queue_id}/pop", responses=UNKNOWN_QUEUE)
def pop(queue_id: str, store: StoreDep, metrics: MetricsDep, body: PopIn | None = None) -> TaskOut | None:
    """Hand out the best queued task (now `dispatched`), or `null` when the queue is empty."""
    started = time.perf_counter()
    with store.session() as session:
        condition = compile_filters(dump_filters(body.filters) if body else None, store.dialect)
        popped = queue.pop(session, scheduler_id=queue_id, limit=1, condition=condition)
        if not popped:
            get_scheduler(session, queue_id)  # an empty queue answers null, an unknown one 404
        task = TaskOut.model_validate(popped[0]) if popped else None
    metrics.pop_latency.observe(time.perf_counter() - started)
    if task is not None:
        metrics.pops.labels(queue_id).inc()
    return task
