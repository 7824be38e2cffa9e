"""Baton's own dialect for queues: `/queues/{id}` (one organisation's queue of one type).

Push and pop only translate HTTP to the queue service and back; the rules live in the service.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Body, Request, Response, status

from baton.api import routing, security
from baton.api.deps import QueuesDep, Responses
from baton.api.keyset import DEFAULT_LIMIT, Cursor, Limit, OrganisationSearch, PrefixSearch, link_next, page_request
from baton.api.longpoll import TOO_MANY_WAITERS, KeyHeader, KeyParameter, Wait, client_leaving, pop_request
from baton.api.responses import json_response, task_document
from baton.api.schemas import ErrorOut, PopIn, PushIn, QueueOut, TaskOut
from baton.core.queueing import PushRequest
from baton.service.queues import QueueService

router = routing.router(prefix="/queues", tags=["queues"])
UNKNOWN_QUEUE: Responses = {404: {"model": ErrorOut, "description": "Unknown queue"}}


@router.get("", dependencies=[security.READ])
def list_queues(
    request: Request,
    response: Response,
    queues: QueuesDep,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    organisation: OrganisationSearch = None,
    q: PrefixSearch = None,
) -> list[QueueOut]:
    """Queues with their size (queued) and tasks in flight, from counters kept by the database; by
    organisation, then id, a page at a time: the next page's address is in the `Link` header
    (`rel="next"`, none on the last page). `organisation`: one organisation's; `q`: those of the
    organisations whose id starts with it."""
    page = queues.queues_page(page_request("queues", limit, cursor, organisation, q))
    link_next(request, response, page.next_cursor)
    return [QueueOut.model_validate(view) for view in page.rows]


@router.get("/{queue_id}", responses=UNKNOWN_QUEUE, dependencies=[security.READ])
def get_queue(queue_id: str, queues: QueuesDep) -> QueueOut:
    return QueueOut.model_validate(queues.get_queue(queue_id))


@router.post(
    "/{queue_id}/push",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskOut,
    responses={
        **UNKNOWN_QUEUE,
        200: {"model": TaskOut, "description": "A queued task with this hash existed: its priority updated"},
        409: {"model": ErrorOut, "description": "The queue is disabled, or the task id is in use"},
        413: {"model": ErrorOut, "description": "`data` too large"},
        429: {"model": ErrorOut, "description": "The queue is full"},
    },
    dependencies=[security.PUSH],
)
async def push(queue_id: str, body: PushIn, queues: QueuesDep) -> Response:
    document, status_code = await push_task(queues, queue_id, body)
    return json_response(document, status_code)


async def push_task(queues: QueueService, queue_id: str, body: PushIn) -> tuple[dict[str, Any], int]:
    """The push of the route and of the fast path (`fastpath.py`): the task document and its status."""
    request = PushRequest(
        queue=queue_id,
        priority=body.priority,
        data=body.data,
        hash=body.hash,
        schedule_id=body.schedule_id,
        task_id=uuid.uuid4(),
    )
    result = await queues.push(request)
    return task_document(result.task), status.HTTP_201_CREATED if result.created else status.HTTP_200_OK


@router.post(
    "/{queue_id}/pop",
    response_model=TaskOut | None,
    responses={**UNKNOWN_QUEUE, **TOO_MANY_WAITERS},
    dependencies=[security.POP],
)
async def pop(
    request: Request,
    queue_id: str,
    queues: QueuesDep,
    body: Annotated[PopIn | None, Body()] = None,
    wait: Wait = 0,
    idempotency_key: KeyParameter = None,
    key_header: KeyHeader = None,
) -> Response:
    """Hand out the best queued task (now `dispatched`), or `null` when the queue is empty; with
    `wait`, an empty queue's answer waits until a task is queued or the time is up (long-poll). With
    an idempotency key, a retry answers the task the first attempt took."""
    pop = pop_request(queues.settings, queues.target(queue=queue_id), 1, body, wait, key_header, idempotency_key)
    async with client_leaving(request, pop.wait) as gone:
        tasks = await queues.pop(pop, gone)
    return json_response(task_document(tasks[0]) if tasks else None)
