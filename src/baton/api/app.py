"""App factory: routers, error mapping to clear JSON, health and metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import structlog
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from baton import __version__
from baton.api import compat, events, organisations, plugins, queues, reports, schedulers, tasks
from baton.api.deps import MetricsDep, Responses, StoreDep, invalid
from baton.api.security import RequestContextMiddleware, authorize
from baton.auth import TokenCache
from baton.config import Settings
from baton.filters import FilterError
from baton.logs import get_logger
from baton.metrics import Metrics
from baton.queue import QueueFullError
from baton.schemas import ErrorOut
from baton.store import ConflictError, NotFoundError, Store

log = get_logger("baton.api")


def _field_name(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(part) for part in loc if part not in ("body", "query", "path")]
    return ".".join(parts) or ".".join(str(part) for part in loc)


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = _field_name(err.get("loc", ()))
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        # The filter language names its own location (`filters[0].operator: ...`).
        problem = message if message.startswith(field) else f"{field}: {message}"
        given = err.get("input")
        if isinstance(given, str | int | float | bool) and len(str(given)) <= 100:
            problem += f" (got {given!r})"
        problems.append(problem)
    return "; ".join(problems)


def allowed_methods(request: Request) -> list[str]:
    """Every method any route serves at this path (Starlette names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


async def reject_unknown_query_parameters(request: Request) -> None:
    """A misspelt filter (`?schedulerid=`) must not silently widen a listing: refuse it."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        known.update(param.alias for param in sub.query_params)
    repeated = sorted(name for name in known if len(request.query_params.getlist(name)) > 1)
    if repeated:
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": "given more than once", "type": "too_long"} for name in repeated]
        )
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": "unknown query parameter", "type": "extra_forbidden"} for name in unknown]
        )


def _install_error_handlers(app: FastAPI) -> None:
    def error(status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(
            headers=headers,
            status_code=status,
            content={
                "detail": jsonable_encoder(detail if detail is not None else message),
                "message": message,
            },
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in err.items() if k in ("loc", "msg", "type")} for err in exc.errors()]
        return error(422, _validation_message(exc), errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error(exc.status_code, str(exc.detail), headers=headers or None)

    @app.exception_handler(NotFoundError)
    async def _not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return error(404, str(exc))

    @app.exception_handler(ConflictError)
    async def _conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return error(409, str(exc))

    @app.exception_handler(QueueFullError)
    async def _full(_: Request, exc: QueueFullError) -> JSONResponse:
        return error(429, str(exc))

    @app.exception_handler(FilterError)
    async def _bad_filter(request: Request, exc: FilterError) -> JSONResponse:
        return await _invalid(request, invalid(("body", "filters"), str(exc)))

    @app.exception_handler(OperationalError)
    async def _database_down(_: Request, exc: OperationalError) -> JSONResponse:
        return error(503, "database unavailable; retry later")

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return error(503, "database connection lost; retry later")
        return _server_fault(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return _server_fault(request, exc)

    def _server_fault(request: Request, exc: Exception) -> JSONResponse:
        """A genuine bug or server fault: log the traceback with the request id, answer JSON."""
        request_id = request.headers.get("x-request-id") or structlog.contextvars.get_contextvars().get("request_id")
        log.error("unhandled error", path=request.url.path, method=request.method, exc_info=exc)
        return error(500, f"internal server error (request id {request_id}); the server log has the details")


class BackgroundService(Protocol):
    def start_in_background(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...


def create_app(
    settings: Settings | None = None,
    store: Store | None = None,
    services: Sequence[BackgroundService] = (),
) -> FastAPI:
    """The API; `services` (e.g. the embedded director) start and stop with the server."""
    settings = settings or Settings()
    store = store or Store(settings.database_url)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for service in services:
            service.start_in_background()
        try:
            yield
        finally:
            for service in services:
                await asyncio.to_thread(service.stop)

    app = FastAPI(
        lifespan=lifespan,
        title="Baton",
        version=__version__,
        description="Priority queues of scanning work per organisation; pop is safe across replicas.",
    )
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = Metrics(store)
    app.state.token_cache = TokenCache()
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes)
    _install_error_handlers(app)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        """Liveness: the process answers. Does not touch the database."""
        return {"status": "ok", "version": __version__}

    # Every route but /health needs a token when authentication is on (see api/security.py).
    monitoring = APIRouter(tags=["health"])

    @monitoring.get("/ready", tags=["health"], responses={503: {"description": "Not ready"}})
    def ready(store: StoreDep) -> JSONResponse:
        """Readiness: the database answers and its schema is current."""
        try:
            current = store.migrations_current()
        except OperationalError:
            return JSONResponse({"status": "unavailable", "message": "database unreachable"}, status_code=503)
        if not current:
            return JSONResponse({"status": "unavailable", "message": "migrations not applied"}, status_code=503)
        return JSONResponse({"status": "ready", "database": store.dialect})

    @monitoring.get("/metrics", tags=["health"], response_class=Response)
    def metrics(metrics: MetricsDep) -> Response:
        """Prometheus text exposition."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    guarded = [Depends(reject_unknown_query_parameters)]
    if settings.auth_required:
        guarded.append(Depends(authorize))
    documented: Responses = {
        400: {"model": ErrorOut, "description": "Malformed request (e.g. a body that is not JSON)"},
        413: {"model": ErrorOut, "description": "Request body too large"},
        503: {"model": ErrorOut, "description": "Database unavailable"},
    }
    if settings.auth_required:
        documented[401] = {"model": ErrorOut, "description": "Missing or unknown bearer token"}
        documented[403] = {"model": ErrorOut, "description": "The token lacks the scope this route needs"}
    for router in (
        monitoring,
        organisations.router,
        queues.router,
        tasks.router,
        schedulers.router,
        compat.router,
        events.router,
        plugins.router,
        reports.router,
    ):
        app.include_router(router, dependencies=guarded, responses=documented)
    return app
