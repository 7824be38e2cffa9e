"""App factory: routers, error mapping to clear JSON, health and metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from baton import __version__
from baton.api import compat, events, organisations, plugins, queues, reports, schedulers, tasks
from baton.api.deps import MetricsDep, StoreDep
from baton.config import Settings
from baton.filters import FilterError
from baton.metrics import Metrics
from baton.queue import QueueFullError
from baton.store import ConflictError, NotFoundError, Store


def _field_name(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(part) for part in loc if part not in ("body", "query", "path")]
    return ".".join(parts) or ".".join(str(part) for part in loc)


def _validation_message(exc: RequestValidationError) -> str:
    problems = [f"{_field_name(err.get('loc', ()))}: {err.get('msg', 'invalid')}" for err in exc.errors()]
    return "; ".join(problems)


def _install_error_handlers(app: FastAPI) -> None:
    def error(status: int, message: str, detail: Any = None) -> JSONResponse:
        return JSONResponse(
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
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

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
    async def _bad_filter(_: Request, exc: FilterError) -> JSONResponse:
        return error(422, f"filters: {exc}")

    @app.exception_handler(OperationalError)
    async def _database_down(_: Request, exc: OperationalError) -> JSONResponse:
        return error(503, "database unavailable; retry later")

    @app.exception_handler(DBAPIError)
    async def _database_error(_: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return error(503, "database connection lost; retry later")
        raise exc


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
    _install_error_handlers(app)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        """Liveness: the process answers. Does not touch the database."""
        return {"status": "ok", "version": __version__}

    @app.get("/ready", tags=["health"], responses={503: {"description": "Not ready"}})
    def ready(store: StoreDep) -> JSONResponse:
        """Readiness: the database answers and its schema is current."""
        try:
            current = store.migrations_current()
        except OperationalError:
            return JSONResponse({"status": "unavailable", "message": "database unreachable"}, status_code=503)
        if not current:
            return JSONResponse({"status": "unavailable", "message": "migrations not applied"}, status_code=503)
        return JSONResponse({"status": "ready", "database": store.dialect})

    @app.get("/metrics", tags=["health"], response_class=Response)
    def metrics(metrics: MetricsDep) -> Response:
        """Prometheus text exposition."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    for router in (
        organisations.router,
        queues.router,
        tasks.router,
        schedulers.router,
        compat.router,
        events.router,
        plugins.router,
        reports.router,
    ):
        app.include_router(router)
    return app
