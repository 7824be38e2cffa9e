"""Every error answer is JSON `{"detail", "message"}`: one table maps Baton's errors to statuses."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from baton.core.errors import (
    BatonError,
    ConfigurationError,
    ConflictError,
    ContradictoryInputError,
    DatabaseUnavailableError,
    FencedError,
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    QueueFullError,
    UnprocessableError,
)
from baton.core.logging import get_logger
from baton.service.queues import TooManyWaitersError

log = get_logger("baton.api")

# Most specific first: the first class an error is an instance of decides its status.
STATUS: list[tuple[type[BatonError], int]] = [
    (NotFoundError, 404),
    (ConflictError, 409),
    (QueueFullError, 429),
    (TooManyWaitersError, 429),
    (PayloadTooLargeError, 413),
    (ContradictoryInputError, 400),
    (InvalidInputError, 422),
    (UnprocessableError, 422),
    (FencedError, 409),
    (ConfigurationError, 500),
    (DatabaseUnavailableError, 503),
]


# What a 503 asks a client to wait: the database is usually back (or failed over) within seconds.
RETRY_AFTER_SECONDS = "1"


def status_of(exc: BatonError) -> int:
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 500)


def error(status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        headers=headers,
        status_code=status,
        content={"detail": jsonable_encoder(detail if detail is not None else message), "message": message},
    )


def field_name(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(part) for part in loc if part not in ("body", "query", "path", "header")]
    return ".".join(parts) or ".".join(str(part) for part in loc)


def validation_message(exc: RequestValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = field_name(err.get("loc", ()))
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            field = "body"
            reason = (err.get("ctx") or {}).get("error", "")
            message = f"not valid JSON ({reason}); NaN, Infinity and invalid UTF-8 are refused too"
        # The filter language names its own location (`filters[0].operator: ...`).
        problem = message if message.startswith(field) else f"{field}: {message}"
        given = err.get("input")
        if isinstance(given, str | int | float | bool) and len(str(given)) <= 100:
            problem += f" (got {given!r})"
        problems.append(problem)
    return "; ".join(problems)


def invalid(location: tuple[str, ...], message: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 in FastAPI's own validation-error shape, so every 422 reads (and documents) alike."""
    return RequestValidationError([{"loc": location, "msg": message, "type": kind}])


def allowed_methods(request: Request) -> list[str]:
    """Every method any route serves at this path (Starlette names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def server_fault(request: Request, exc: BaseException) -> JSONResponse:
    """A genuine bug or server fault: log the traceback with the request id, answer JSON."""
    request_id = structlog.contextvars.get_contextvars().get("request_id") or request.headers.get("x-request-id")
    log.error("unhandled error", path=request.url.path, method=request.method, exc_info=exc)
    return error(500, f"internal server error (request id {request_id}); the server log has the details")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in err.items() if k in ("loc", "msg", "type")} for err in exc.errors()]
        return error(422, validation_message(exc), errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error(exc.status_code, str(exc.detail), headers=headers or None)

    @app.exception_handler(BatonError)
    async def _baton(request: Request, exc: BatonError) -> JSONResponse:
        status = status_of(exc)
        if status == 500:
            return server_fault(request, exc)
        if isinstance(exc, InvalidInputError):
            return await _invalid(request, invalid(("body",), str(exc)))
        if isinstance(exc, DatabaseUnavailableError):
            return error(status, str(exc), headers={"Retry-After": RETRY_AFTER_SECONDS})
        return error(status, str(exc))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return server_fault(request, exc)
