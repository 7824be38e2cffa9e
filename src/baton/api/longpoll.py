"""A pop request for both dialects: long-poll (`?wait=seconds`, its bound, the client leaving) and the
idempotency key.

A pop with `wait` goes through FastAPI's routes, never the fast path (which takes only plain pops):
it may sleep for seconds, so the few microseconds saved would not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError

from baton.api.schemas import ErrorOut, PopIn, filter_tree
from baton.core.queueing import PopRequest, PopTarget
from baton.core.receipts import KEY_HEADER, KEY_MAX_LENGTH, KEY_PARAMETER, key_problem
from baton.core.settings import Settings

WAIT_DESCRIPTION = (
    "Long-poll: when nothing is queued, wait up to this many seconds for a task and answer as soon as one "
    "is queued (else the usual empty answer when the time is up). 0, the default: answer at once. At most "
    "BATON_POP_MAX_WAIT_SECONDS (default 30). When the server already holds BATON_POP_MAX_WAITERS waiting "
    "pops (default 1000) and nothing is queued, the answer is 429."
)
Wait = Annotated[float, Query(ge=0, allow_inf_nan=False, description=WAIT_DESCRIPTION)]
KEY_DESCRIPTION = (
    f"Idempotency key of this pop (1 to {KEY_MAX_LENGTH} printable ASCII characters, e.g. a UUID the client makes per "
    "pop and keeps when it retries): the same key on the same queue within BATON_POP_RECEIPT_SECONDS (default "
    "300) answers the tasks the first attempt took (those still dispatched) instead of new ones."
)
KeyHeader = Annotated[str | None, Header(alias=KEY_HEADER, description=KEY_DESCRIPTION)]
KeyParameter = Annotated[str | None, Query(alias=KEY_PARAMETER, description=KEY_DESCRIPTION)]
TOO_MANY_WAITERS: dict[int | str, dict[str, Any]] = {
    429: {"model": ErrorOut, "description": "Nothing queued, and the server holds its limit of waiting pops"}
}


def document_wait_maximum(app: FastAPI, maximum: float) -> None:
    """Put this server's BATON_POP_MAX_WAIT_SECONDS into the OpenAPI schema as `wait`'s maximum (the
    routes are declared before settings are known, so the schema is amended when first built)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            for operation in (op for path in build()["paths"].values() for op in path.values()):
                for parameter in operation.get("parameters", ()):
                    if parameter["name"] == "wait" and parameter["in"] == "query":
                        parameter["schema"]["maximum"] = maximum
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]


def check_wait(wait: float, settings: Settings) -> None:
    longest = settings.pop_max_wait_seconds
    if wait > longest:
        problem = f"at most {longest:g} seconds (BATON_POP_MAX_WAIT_SECONDS)"
        raise RequestValidationError(
            [{"loc": ("query", "wait"), "msg": problem, "type": "less_than_equal", "input": wait}]
        )


def pop_key(header: str | None, parameter: str | None = None) -> str | None:
    """The pop's idempotency key, from the `Idempotency-Key` header or the `idempotency_key` query
    parameter; a 422 naming the one that cannot be a key, or both when they differ."""
    for location, value in ((("header", KEY_HEADER), header), (("query", KEY_PARAMETER), parameter)):
        problem = None if value is None else key_problem(value)
        if problem is not None:
            raise RequestValidationError([{"loc": location, "msg": problem, "type": "value_error", "input": value}])
    if header is not None and parameter is not None and header != parameter:
        problem = f"{KEY_HEADER} and {KEY_PARAMETER} differ; give one"
        raise RequestValidationError([{"loc": ("query", KEY_PARAMETER), "msg": problem, "type": "value_error"}])
    return header if header is not None else parameter


def pop_request(
    settings: Settings,
    target: PopTarget,
    limit: int,
    body: PopIn | None,
    wait: float,
    key_header: str | None,
    key_parameter: str | None = None,
) -> PopRequest:
    """The pop a route was asked for, its inputs checked (422 naming the one that is wrong)."""
    check_wait(wait, settings)
    key = pop_key(key_header, key_parameter)
    return PopRequest(target, limit, filter_tree(body.filters) if body else None, wait, key)


async def watch_disconnect(request: Request, gone: asyncio.Event) -> None:
    """Set `gone` when the client hangs up (the ASGI server says so as the next message)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


@contextlib.asynccontextmanager
async def client_leaving(request: Request, wait: float) -> AsyncIterator[asyncio.Event | None]:
    """While a long-poll pop waits, an event set when its client hangs up; None for a pop that does not wait."""
    if wait == 0:
        yield None
        return
    gone = asyncio.Event()
    watcher = asyncio.ensure_future(watch_disconnect(request, gone))
    try:
        yield gone
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
