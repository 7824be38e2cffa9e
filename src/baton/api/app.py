"""App factory: routers, errors as JSON, health and metrics. The app is stateless: any replica
serves any queue."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any, Protocol

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from baton import __version__
from baton.api import events, openkat, organisations, plugins, queues, reports, schedulers, schedules, security, tasks
from baton.api.deps import AppServicesDep, MetricsDep, Responses
from baton.api.errors import install_error_handlers
from baton.api.longpoll import document_wait_maximum
from baton.api.middleware import RequestContextMiddleware
from baton.api.schemas import IGNORES_UNKNOWN_QUERY_PARAMETERS, ErrorOut
from baton.core.logging import get_logger
from baton.service.app_services import AppServices
from baton.ui.router import status_router

log = get_logger("baton.api")


class Service(Protocol):
    def start_in_background(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...


def known_query_parameters(route: Any) -> frozenset[str]:
    """The query parameters a route declares (its own and its dependencies'), worked out once."""
    known: frozenset[str] | None = getattr(route, "_baton_query_parameters", None)
    if known is None:
        dependant = route.dependant
        names = {param.alias for param in dependant.query_params}
        for sub in dependant.dependencies:
            names.update(param.alias for param in sub.query_params)
        known = frozenset(names)
        route._baton_query_parameters = known
    return known


async def reject_unknown_query_parameters(request: Request) -> None:
    """A misspelt filter (`?schedulerid=`) must not silently widen a listing: refuse it."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    if getattr(route, "dependant", None) is None:
        return
    known = known_query_parameters(route)
    repeated = sorted(name for name in known if len(request.query_params.getlist(name)) > 1)
    if repeated:
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": "given more than once", "type": "too_long"} for name in repeated]
        )
    unknown = sorted(set(request.query_params) - known)
    if unknown and not ignores_unknown_query_parameters(route):
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": "unknown query parameter", "type": "extra_forbidden"} for name in unknown]
        )


def ignores_unknown_query_parameters(route: Any) -> bool:
    """Routes OpenKAT's web UI calls with every query parameter of its own page (`page`, ...)."""
    return bool((getattr(route, "openapi_extra", None) or {}).get(IGNORES_UNKNOWN_QUERY_PARAMETERS))


def on_stop_signals(action: Callable[[], None]) -> Callable[[], None]:
    """Run `action` on the event loop when SIGTERM or SIGINT arrives, after the server's own handler.

    uvicorn lets open requests finish before it runs the lifespan's shutdown: a pop waiting for a task
    would hold a stop for up to its `wait`. So the app hears the signal too, and ends the waits at once
    (granian's workers too: their loop's handler is chained as uvicorn's is). Returns the function that
    puts the server's handlers back. Only in the main thread (where the server handles signals; an app
    served from another thread, as in tests, is stopped by its lifespan)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous: dict[int, Callable[[int, FrameType | None], Any]] = {}

    def chained(signum: int, frame: FrameType | None) -> None:
        previous[signum](signum, frame)
        loop.call_soon_threadsafe(action)

    for signum in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(signum)
        if callable(handler):  # not SIG_DFL or SIG_IGN: a server that stops gracefully
            previous[signum] = handler
            signal.signal(signum, chained)

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def monitoring_router() -> APIRouter:
    router = APIRouter(tags=["health"], route_class=security.AuthenticatedRoute)

    @router.get("/ready", responses={503: {"description": "Not ready"}})
    def ready(app_services: AppServicesDep) -> JSONResponse:
        """Readiness: the database answers and its schema is current (else 503). Still 200 while KATalogus,
        Octopoes or Bytes fails, with `status` "degraded" and which one since when (`degraded`);
        `outside_services` gives each configured or recorded one's state (up, down, unknown). Needs no
        token (a probe has none; the answer tells only the database's kind and the services' states, not
        why one fails: the status page says that)."""
        readiness = app_services.readiness()
        if readiness.problem is not None:
            return JSONResponse({"status": "unavailable", "message": readiness.problem}, status_code=503)
        degraded = readiness.degraded
        body: dict[str, Any] = {"status": "degraded" if degraded else "ready", "database": app_services.dialect}
        if readiness.outside:
            body["outside_services"] = {status.service: status.state for status in readiness.outside}
        if degraded:
            body["degraded"] = [
                {
                    "service": status.service,
                    "down_since": status.down_since.isoformat() if status.down_since else None,
                    "down_seconds": round(status.down_seconds or 0.0, 1),
                }
                for status in degraded
            ]
        return JSONResponse(body)

    @router.get("/metrics", response_class=Response, dependencies=[security.READ])
    def metrics(metrics: MetricsDep) -> Response:
        """Prometheus text exposition."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router


# The hot paths first: Starlette tries routes in order, so pops and pushes match at once.
ROUTERS = (
    queues.router,
    openkat.router,
    tasks.router,
    organisations.router,
    schedulers.router,
    events.router,
    plugins.router,
    reports.router,
    schedules.router,
)


def create_app(built: AppServices, services: Sequence[Service] = ()) -> FastAPI:
    """The API, serving with `built` (made by `baton.runtime.app_services` from the settings and a store);
    `services` (e.g. the embedded director) start and stop with the server."""
    settings = built.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The executor's pool and the wake-ups' listener belong to the server's event loop: made
        # here, closed here.
        app.state.queues = built.queue_service()
        app.state.queues.start()
        restore_signals = on_stop_signals(app.state.queues.stop_waiting)
        for service in services:
            service.start_in_background()
        # Whichever server runs the app (http_server.py), these two lines say its lifespan ran.
        log.info("api started", pid=os.getpid())
        try:
            yield
        finally:
            restore_signals()
            for service in services:
                await asyncio.to_thread(service.stop)
            await app.state.queues.close()
            log.info("api stopped", pid=os.getpid())

    app = FastAPI(
        lifespan=lifespan,
        title="Baton",
        version=__version__,
        description="Priority queues of scanning work per organisation; pop is safe across replicas.",
    )
    app.router.route_class = security.AuthenticatedRoute  # the app's own routes (/health), as every router's
    app.state.app_services = built
    app.state.settings = settings
    app.state.metrics = built.metrics
    app.state.token_cache = built.tokens
    app.add_middleware(
        RequestContextMiddleware, max_body_bytes=settings.max_body_bytes, db_wait_seconds=settings.db_wait_seconds
    )
    install_error_handlers(app)
    document_wait_maximum(app, settings.pop_max_wait_seconds)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, Any]:
        """Liveness: the process answers. Does not touch the database. `service` and `healthy` are
        what OpenKAT's web UI reads from its scheduler's health."""
        return {"status": "ok", "version": __version__, "service": "scheduler", "healthy": True}

    documented: Responses = {
        400: {"model": ErrorOut, "description": "Malformed request (e.g. a body that is not JSON)"},
        413: {"model": ErrorOut, "description": "Request body too large"},
        503: {"model": ErrorOut, "description": "Database unavailable"},
    }
    if settings.auth_required:
        documented[401] = {"model": ErrorOut, "description": "Missing or unknown bearer token"}
        documented[403] = {"model": ErrorOut, "description": "The token lacks the scope this route needs"}
    guarded = [Depends(reject_unknown_query_parameters)]
    for router in (*ROUTERS, monitoring_router(), status_router(security)):
        app.include_router(router, dependencies=guarded, responses=documented)
    return app
