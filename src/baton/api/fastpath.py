"""The plain pop, answered before FastAPI's routing: `POST /queues/{id}/pop` and
`POST /schedulers/{scheduler}/pop[?limit=N]` with no body.

A job runner's pop is most of the traffic and the smallest request there is, yet FastAPI spends more
per request on routing, dependency resolution and its Response than the database spends on the pop
(on SQLite, about as much again). Here such a pop costs a path split and the service call.

Same answer as the routes in `queues.py` and `openkat.py`, byte for byte: the same service call, the
same documents. Only the case that needs no validation is taken: no body, no query string but a
well-formed `limit`, and either authentication off or a cached token granting `pop`. Anything else,
and any error (unknown queue, database outage), goes on to the FastAPI app, which answers as always
(an error raised here changed nothing: a pop that raises has handed out no task).
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from starlette.types import Scope, Send

from baton.api.openkat import pop_target
from baton.api.responses import OPTIONS, openkat_task_document, task_document
from baton.api.schemas import MAX_LIST_LIMIT
from baton.service.tokens import Scope as TokenScope
from baton.service.tokens import grants

JSON_HEADERS = (b"content-type", b"application/json")


def pop_limit(query: bytes) -> int | None:
    """1 for no query string, N for exactly `limit=N` within bounds, else None (let FastAPI judge)."""
    if not query:
        return 1
    name, _, value = query.partition(b"=")
    if name != b"limit" or not value.isdigit() or len(value) > 5:
        return None
    limit = int(value)
    return limit if 1 <= limit <= MAX_LIST_LIMIT else None


def authorised(scope: Scope, state: Any) -> bool:
    """Authentication off, or a bearer token the cache knows that grants `pop`."""
    if not state.settings.auth_required:
        return True
    header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
    if header is None:
        return False
    scheme, _, token = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return False
    found = state.token_cache.cached(token)
    if found is None or not grants(found[1], TokenScope.POP):
        return False
    structlog.contextvars.bind_contextvars(token=found[0])
    return True


async def answer_pop(scope: Scope, body: bytes, send: Send) -> bool:
    """Answer a plain pop and return True, or return False and touch nothing."""
    if scope["method"] != "POST" or body:
        return False
    parts = scope["path"].split("/")
    if len(parts) != 4 or parts[0] or parts[3] != "pop" or not parts[2] or parts[1] not in ("queues", "schedulers"):
        return False
    query = scope.get("query_string", b"")
    limit = (None if query else 1) if parts[1] == "queues" else pop_limit(query)
    if limit is None:
        return False
    state = scope["app"].state
    if not authorised(scope, state):
        return False
    queues = getattr(state, "queues", None)
    if queues is None:
        return False
    target = queues.target(queue=parts[2]) if parts[1] == "queues" else pop_target(queues, parts[2])
    try:
        tasks = await queues.pop(target, limit, None)
    except Exception:  # FastAPI answers it (404, 503, ...) when it runs the same pop again
        return False
    content: Any
    if parts[1] == "queues":
        content = task_document(tasks[0]) if tasks else None
    else:
        content = {"results": [openkat_task_document(task) for task in tasks]}
    payload = orjson.dumps(content, option=OPTIONS)
    headers = [JSON_HEADERS, (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
    return True
