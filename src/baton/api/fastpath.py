"""A job runner's requests, answered before FastAPI's routing: the plain pop (`POST /queues/{id}/pop`,
`POST /schedulers/{scheduler}/pop[?limit=N]` with no body), the push (`POST /queues/{id}/push` and
`POST /schedulers/{scheduler}/push`, OpenKAT's web UI and runners, with a JSON body), and a task read
back or moved along (`GET /tasks/{id}`, `PATCH /tasks/{id}` with a JSON body: OpenKAT's runners send one
read and two status changes for every task they run).

These are most of the traffic and the smallest requests there are, yet FastAPI spends more per request
on routing, dependency resolution and its Response than the database spends on the statement (on
SQLite, about as much again). Here such a request costs a path split and the service call, and the
validation of its body by the route's own model.

Same answer as the routes in `queues.py`, `openkat.py` and `tasks.py`, byte for byte: the same service
call, the same documents. Only the common case is taken: a pop with no body, no query string but a
well-formed `limit` and no `Idempotency-Key`; a push or PATCH with no query string and a body that is
JSON (no Content-Type, or `application/json`) which the route's model accepts; a task id in its
canonical form (lowercase, hyphenated) and no query string; and either authentication off or a cached
token granting the scope. Whatever is not taken goes on to the FastAPI app, which answers as always.

What the service call raises is answered where it was raised, by the app's own exception handlers
(the ones FastAPI's exception middleware would call), never by running the call again through the
route: a push that raised may have written its task (a connection lost after the commit), and a pop
that raised may have committed too (its receipt is settled: core/receipts.py); and a second try
would wait for the database again, past the request's one deadline (BATON_DB_WAIT_SECONDS).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import orjson
import structlog
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Message, Scope, Send

from baton.api.openkat import DUPLICATE, CompatPushIn, pop_target, push_answer
from baton.api.queues import push_task
from baton.api.responses import OPTIONS, openkat_task_document, task_document
from baton.api.schemas import MAX_LIST_LIMIT, PushIn, TaskPatch
from baton.core.queueing import PopRequest
from baton.core.tokens import Scope as TokenScope
from baton.core.tokens import grants

JSON_HEADERS = (b"content-type", b"application/json")
KEY_HEADER = b"idempotency-key"
RETRY_AFTER = (b"retry-after", b"60")
Body = TypeVar("Body", PushIn, CompatPushIn, TaskPatch)
Headers = Sequence[tuple[bytes, bytes]]


async def answer(scope: Scope, body: bytes, send: Send) -> bool:
    """Answer the request here and return True, or return False having touched nothing."""
    method = scope["method"]
    if method == "POST":
        return await (answer_push if body else answer_pop)(scope, body, send)
    if method in ("GET", "PATCH"):
        return await answer_task(scope, body, send)
    return False


def pop_limit(query: bytes) -> int | None:
    """1 for no query string, N for exactly `limit=N` within bounds, else None (let FastAPI judge)."""
    if not query:
        return 1
    name, _, value = query.partition(b"=")
    if name != b"limit" or not value.isdigit() or len(value) > 5:
        return None
    limit = int(value)
    return limit if 1 <= limit <= MAX_LIST_LIMIT else None


def authorised(scope: Scope, state: Any, needed: TokenScope) -> bool:
    """Authentication off, or a bearer token the cache knows that grants `needed`."""
    if not state.settings.auth_required:
        return True
    header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
    if header is None:
        return False
    scheme, _, token = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return False
    found = state.token_cache.cached(token)
    if found is None or not grants(found[1], needed):
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
    if any(name == KEY_HEADER for name, _ in scope["headers"]) or not authorised(scope, state, TokenScope.POP):
        return False
    queues = getattr(state, "queues", None)
    if queues is None:
        return False
    target = queues.target(queue=parts[2]) if parts[1] == "queues" else pop_target(queues, parts[2])
    try:
        tasks = await queues.pop(PopRequest(target, limit))
    except Exception as exc:
        await answer_error(scope, exc, send)  # not the route: see the module's description
        return True
    content: Any
    if parts[1] == "queues":
        content = task_document(tasks[0]) if tasks else None
    else:
        content = {"results": [openkat_task_document(task) for task in tasks]}
    await send_json(send, 200, content)
    return True


def json_body(scope: Scope) -> bool:
    """Whether the route would read the body as JSON: no Content-Type (`routing.JsonRoute`), or plain
    `application/json` (anything fancier, even `; charset=utf-8`, is left to the route)."""
    content_type = next((value for name, value in scope["headers"] if name == b"content-type"), None)
    return content_type is None or content_type.lower() == b"application/json"


def parsed_body(body: bytes, model: type[Body]) -> Body | None:
    """The body as the route reads it (orjson, then the route's model), or None for the route to refuse."""
    try:
        return model.model_validate(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError):
        return None


async def answer_push(scope: Scope, body: bytes, send: Send) -> bool:
    """Answer a plain push, in either dialect, and return True, or return False having touched nothing."""
    if scope["method"] != "POST" or not body or scope.get("query_string"):
        return False
    parts = scope["path"].split("/")
    if len(parts) != 4 or parts[0] or parts[1] not in ("queues", "schedulers") or not parts[2] or parts[3] != "push":
        return False
    state = scope["app"].state
    queues = getattr(state, "queues", None)
    if queues is None or not json_body(scope) or not authorised(scope, state, TokenScope.PUSH):
        return False
    call: Coroutine[Any, Any, tuple[Any, int, Headers]]
    if parts[1] == "queues":
        ours = parsed_body(body, PushIn)
        if ours is None:
            return False
        call = baton_push(queues, parts[2], ours)
    else:
        theirs = parsed_body(body, CompatPushIn)
        if theirs is None:
            return False
        call = openkat_push(queues, parts[2], theirs)
    try:
        content, status, headers = await call
    except Exception as exc:
        await answer_error(scope, exc, send)  # not the route: the push may have been written
        return True
    await send_json(send, status, content, headers)
    return True


def canonical_task_id(text: str) -> uuid.UUID | None:
    """The id in the form Baton writes it (lowercase, hyphenated); any other spelling FastAPI reads is
    left to the route."""
    if len(text) != 36:
        return None
    try:
        task_id = uuid.UUID(text)
    except ValueError:
        return None
    return task_id if str(task_id) == text else None


async def answer_task(scope: Scope, body: bytes, send: Send) -> bool:
    """Answer `GET /tasks/{id}` or a plain `PATCH /tasks/{id}` (its status) and return True, or return
    False having touched nothing."""
    if scope.get("query_string"):
        return False
    parts = scope["path"].split("/")
    if len(parts) != 3 or parts[0] or parts[1] != "tasks":
        return False
    task_id = canonical_task_id(parts[2])
    state = scope["app"].state
    queues = getattr(state, "queues", None)
    if task_id is None or queues is None:
        return False
    call: Coroutine[Any, Any, dict[str, Any]]
    if scope["method"] == "GET":
        if body or not authorised(scope, state, TokenScope.READ):
            return False
        call = queues.task(task_id)
    else:
        if not body or not json_body(scope) or not authorised(scope, state, TokenScope.POP):
            return False
        patch = parsed_body(body, TaskPatch)
        if patch is None:
            return False
        call = queues.change_status(task_id, patch.status)
    try:
        record = await call
    except Exception as exc:
        await answer_error(scope, exc, send)  # not the route: a status change may have been written
        return True
    await send_json(send, 200, openkat_task_document(record))
    return True


async def baton_push(queues: Any, queue_id: str, document: PushIn) -> tuple[Any, int, Headers]:
    content, status = await push_task(queues, queue_id, document)
    return content, status, []


async def openkat_push(queues: Any, scheduler: str, document: CompatPushIn) -> tuple[Any, int, Headers]:
    """As the route `openkat.push_one` answers: 201 with the task, or OpenKAT's 409 for a duplicate."""
    content = await push_answer(queues, scheduler, document)
    if content is None:
        return {"detail": DUPLICATE, "message": DUPLICATE}, 409, [RETRY_AFTER]
    return content, 201, []


async def answer_error(scope: Scope, exc: Exception, send: Send) -> None:
    """The answer of the app's own handler for `exc`, as FastAPI's exception middleware gives it; an
    error no handler of that middleware takes is raised on, to the server-error middleware, as from
    a route."""
    handler = exception_handler(scope["app"].exception_handlers, exc)
    if handler is None:
        raise exc
    response = handler(Request(scope), exc)
    if inspect.isawaitable(response):
        response = await response
    await response(scope, nothing_more, send)


def exception_handler(handlers: dict[Any, Any], exc: Exception) -> Any:
    """The handler FastAPI's exception middleware picks: the nearest class of `exc` with one. That
    of `Exception` belongs to the server-error middleware, outside this one."""
    for kind in type(exc).__mro__:
        if kind is Exception:
            return None
        if kind in handlers:
            return handlers[kind]
    return None


async def nothing_more() -> Message:
    return {"type": "http.disconnect"}


async def send_json(send: Send, status: int, content: Any, extra: Headers = ()) -> None:
    """`content` as `responses.json_response` renders it, with the same headers (and `extra`)."""
    payload = orjson.dumps(content, option=OPTIONS)
    headers = [(b"content-length", str(len(payload)).encode()), JSON_HEADERS, *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
