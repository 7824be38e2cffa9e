"""The status page: `/ui` (a page shell with no data in it), its data as JSON under `/ui/api/...`, the
same data as HTML fragments under `/ui/fragments/...` for the page's script to swap in, and two
operator actions (requeue, change priority).

Authentication is the API's own, passed in by the app (`status_router(security)`): every data route
declares the scope it needs, a bearer token travels in the `Authorization` header, never in a cookie,
so there is no cross-site request forgery to defend against. Fragments leave out the buttons the
token may not use; the action routes refuse such a token anyway (403).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Body, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from baton import __version__
from baton.core.events import NOT_A_STRING
from baton.core.listing import CURSOR_PATTERN, MAX_CURSOR_LENGTH, SEARCH_PATTERN, InvalidListingError, Listing
from baton.core.model import OrganisationId, SchedulerType, TaskStatus
from baton.core.settings import Settings
from baton.core.tokens import Scope, grants
from baton.service.status import (
    ControlPlane,
    Overview,
    PageRequest,
    SchedulerPage,
    StatusService,
    TaskDetail,
    TaskFilter,
    TaskPage,
)
from baton.ui.render import load_static, render

POLL_MILLISECONDS = 2000
MAX_SEQ = 2**63 - 1
TAGS: list[str | Enum] = ["status page"]
# Served with every page and fragment: only this origin's own script, styles and requests.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Security(Protocol):
    """What the page takes from the API's authentication (baton/api/security.py)."""

    bearer: HTTPBearer

    @property
    def AuthenticatedRoute(self) -> type[APIRoute]:
        """The page's routes check the token before anything else of a request (401 before 422)."""

    def requires(self, scope: Scope) -> Any: ...

    async def authenticate(
        self, request: Request, credentials: HTTPAuthorizationCredentials | None
    ) -> tuple[str, list[str]]: ...


class SessionOut(BaseModel):
    """Who the page acts as, and which of its buttons this token may use."""

    auth_required: bool
    token: str | None = Field(description="The token's name; null with authentication off.")
    scopes: list[str]
    can_cancel: bool = Field(description="`pop`: PATCH /tasks/{id} to `cancelled`.")
    can_requeue: bool = Field(description="`admin`: POST /ui/api/tasks/{id}/requeue.")
    can_change_priority: bool = Field(description="`admin`: PUT /ui/api/tasks/{id}/priority.")


class PriorityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # As the API's pushes take it: a JSON number with no fraction; strings and booleans are refused.
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1, description="Lower pops first."), NOT_A_STRING]


@dataclass(frozen=True)
class Identity:
    auth_required: bool
    name: str | None
    scopes: list[str]

    @property
    def actor(self) -> str:
        return f"token '{self.name}'" if self.name else "an operator"

    def session(self) -> SessionOut:
        return SessionOut(
            auth_required=self.auth_required,
            token=self.name,
            scopes=self.scopes,
            can_cancel=grants(self.scopes, Scope.POP),
            can_requeue=grants(self.scopes, Scope.ADMIN),
            can_change_priority=grants(self.scopes, Scope.ADMIN),
        )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's own lifespan, so its queue service exists already."""
    services = app.state.app_services
    status: StatusService = services.status_service(app.state.queues, services.broker())
    app.state.status_page = status
    sampler = asyncio.create_task(status.rates.run(), name="status-page-rates")
    try:
        yield
    finally:
        sampler.cancel()


def service(request: Request) -> StatusService:
    status: StatusService = request.app.state.status_page
    return status


def html(body: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code, headers=SECURITY_HEADERS)


Limit = Annotated[int, Query(ge=1, le=200)]
After = Annotated[
    str | None,
    Query(max_length=MAX_CURSOR_LENGTH, description="Keyset cursor: a page's `next_cursor`."),
]
Until = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_LENGTH,
        pattern=CURSOR_PATTERN,
        description="Keyset cursor: the page before, a `previous_cursor`.",
    ),
]
OrganisationPrefix = Annotated[
    str | None, Query(max_length=64, pattern=SEARCH_PATTERN, description="Organisations whose id starts with it.")
]
Before = Annotated[int | None, Query(ge=1, le=MAX_SEQ, description="Keyset cursor: tasks older than this seq.")]
Search = Annotated[str | None, Query(min_length=1, max_length=256, description="A task id or a task hash.")]
TaskId = Annotated[uuid.UUID, Path()]


def page_request(
    listing: Listing,
    limit: int,
    after: str | None,
    before: str | None,
    q: str | None,
    organisation: str | None = None,
) -> PageRequest:
    """The checked page; a refused parameter answers 422 naming it (as the API's listings do)."""
    try:
        return PageRequest.of(listing, limit=limit, cursor=after, before=before, organisation=organisation, q=q)
    except InvalidListingError as exc:
        field = "after" if exc.field == "cursor" and after is not None else exc.field
        raise RequestValidationError([{"loc": ("query", field), "msg": exc.reason, "type": "value_error"}]) from None


@functools.cache
def status_router(security: Security) -> APIRouter:
    """The page's routes, each declaring its scope through the API's own `security.requires`. Made
    once per process: every app copies the same routes, and making them (FastAPI derives each one's
    parameters and response schema) took nine tenths of `create_app`'s time."""
    # Cancelling is the API's own PATCH /tasks/{id} (scope pop): the page calls it as it is.
    read, admin = security.requires(Scope.READ), security.requires(Scope.ADMIN)
    router = APIRouter(prefix="/ui", lifespan=lifespan, route_class=security.AuthenticatedRoute)
    static_files = load_static()

    async def identity(request: Request) -> Identity:
        settings: Settings = request.app.state.settings
        if not settings.auth_required:
            return Identity(False, None, [scope.value for scope in Scope])
        name, scopes = await security.authenticate(request, await security.bearer(request))
        return Identity(True, name, scopes)

    # -- the page shell and its own files: public, they hold no data ---------------------------------

    @router.get("", include_in_schema=False)
    def page(request: Request) -> HTMLResponse:
        settings: Settings = request.app.state.settings
        return html(
            render("page.html", auth_required=settings.auth_required, poll_ms=POLL_MILLISECONDS, version=__version__)
        )

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str, request: Request) -> Response:
        found = static_files.get(name)
        if found is None:
            raise HTTPException(404, f"no static file '{name}'")
        headers = {"ETag": found.etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == found.etag:
            return Response(status_code=304, headers=headers)
        media_type = found.media_type + ("; charset=utf-8" if found.media_type.startswith("text/") else "")
        return Response(found.body, media_type=media_type, headers=headers)

    # -- data as JSON ----------------------------------------------------------------------------------

    @router.get("/api/session", tags=TAGS, dependencies=[read])
    async def who_am_i(request: Request) -> SessionOut:
        """The token's name and scopes, and which actions the page offers it."""
        return (await identity(request)).session()

    @router.get("/api/overview", tags=TAGS, dependencies=[read])
    def overview(
        request: Request, limit: Limit = 50, after: After = None, before: Until = None, q: OrganisationPrefix = None
    ) -> Overview:
        """The estate's counts (organisations, schedulers by state, queued and in flight) and totals
        per type, by aggregate SQL; organisations by id a keyset page at a time (`next_cursor` is the
        next page's `after`, `previous_cursor` the previous page's `before`; `q`: ids starting with
        it), each with its queues: queued and in flight from the counters, failed in the last hour,
        oldest queued task, full queues; pop and push rates of this process over the last 15 minutes."""
        return service(request).overview(page_request("organisations", limit, after, before, q))

    @router.get("/api/schedulers", tags=TAGS, dependencies=[read])
    def schedulers(
        request: Request,
        limit: Limit = 50,
        after: After = None,
        before: Until = None,
        q: OrganisationPrefix = None,
        organisation: Annotated[
            str | None, Query(max_length=64, pattern=SEARCH_PATTERN, description="One organisation's.")
        ] = None,
        problems: bool = False,
    ) -> SchedulerPage:
        """Schedulers by organisation, then id, a keyset page at a time, with where each runs, its
        state by the heartbeat rule and its lease; the estate's counts by state (`problems=true`:
        only failed and stale ones)."""
        return service(request).schedulers(page_request("schedulers", limit, after, before, q, organisation), problems)

    @router.get("/api/control-plane", tags=TAGS, dependencies=[read])
    def control_plane(request: Request) -> ControlPlane:
        """Who leads and since when, workers and scheduler leases where the database has them,
        RabbitMQ consumers and dead letters where RabbitMQ is configured."""
        return service(request).control_plane(request.app.state.app_services.broker_queues)

    @router.get("/api/tasks", tags=TAGS, dependencies=[read])
    def tasks(
        request: Request,
        organisation: Annotated[OrganisationId | None, Query()] = None,
        type: SchedulerType | None = None,
        status: TaskStatus | None = None,
        q: Search = None,
        before: Before = None,
        limit: Limit = 50,
    ) -> TaskPage:
        """Newest first, a keyset page at a time: `next_before` is the next page's `before` (null: no
        more). No count of matching tasks is made; `known_total` comes from the counters when they
        answer the filter (status `queued`)."""
        wanted = TaskFilter(organisation, type, status, q)
        return service(request).tasks(wanted, before, limit)

    responses: dict[int | str, dict[str, Any]] = {
        404: {"description": "Unknown task"},
        409: {"description": "Not possible in the task's status, the queue is disabled, or a twin is queued"},
    }

    @router.post(
        "/api/tasks/{task_id}/requeue",
        tags=TAGS,
        dependencies=[admin],
        responses={**responses, 429: {"description": "The queue is full"}},
    )
    async def requeue(task_id: TaskId, request: Request) -> TaskDetail:
        """Put a `failed` task, or a `dispatched` or `running` one that is stuck, back in its queue.
        Refused (409) when a task with its hash is queued already, or the queue is disabled; 429 when
        the queue is full. `reason` records who requeued it."""
        who = await identity(request)
        return await asyncio.to_thread(service(request).requeue, task_id, who.actor)

    @router.put("/api/tasks/{task_id}/priority", tags=TAGS, dependencies=[admin], responses=responses)
    async def change_priority(task_id: TaskId, body: Annotated[PriorityIn, Body()], request: Request) -> TaskDetail:
        """Give a `queued` task a new priority (lower pops first); 409 for any other status."""
        who = await identity(request)
        return await asyncio.to_thread(service(request).change_priority, task_id, body.priority, who.actor)

    # -- the same data as HTML fragments, for the page ------------------------------------------------

    @router.get("/fragments/overview", include_in_schema=False, dependencies=[read])
    def overview_fragment(
        request: Request, limit: Limit = 50, after: After = None, before: Until = None, q: OrganisationPrefix = None
    ) -> HTMLResponse:
        view = service(request).overview(page_request("organisations", limit, after, before, q))
        return html(render("overview.html", view=view, params={"q": q, "limit": limit if limit != 50 else None}))

    @router.get("/fragments/schedulers", include_in_schema=False, dependencies=[read])
    def schedulers_fragment(
        request: Request,
        limit: Limit = 50,
        after: After = None,
        before: Until = None,
        q: OrganisationPrefix = None,
        organisation: Annotated[str | None, Query(max_length=64, pattern=SEARCH_PATTERN)] = None,
        problems: bool = False,
    ) -> HTMLResponse:
        wanted = page_request("schedulers", limit, after, before, q, organisation)
        view = service(request).schedulers(wanted, problems)
        params = {"q": q, "organisation": organisation, "problems": 1 if problems else None}
        params["limit"] = limit if limit != 50 else None
        return html(render("schedulers.html", view=view, params=params))

    @router.get("/fragments/control-plane", include_in_schema=False, dependencies=[read])
    def control_plane_fragment(request: Request) -> HTMLResponse:
        return html(
            render("control.html", view=service(request).control_plane(request.app.state.app_services.broker_queues))
        )

    @router.get("/fragments/tasks", include_in_schema=False, dependencies=[read])
    async def tasks_fragment(
        request: Request,
        organisation: Annotated[OrganisationId | None, Query()] = None,
        type: SchedulerType | None = None,
        status: TaskStatus | None = None,
        q: Search = None,
        before: Before = None,
        limit: Limit = 50,
        task: Annotated[uuid.UUID | None, Query(description="The task shown beside the list.")] = None,
    ) -> HTMLResponse:
        who = (await identity(request)).session()
        wanted = TaskFilter(organisation, type, status, q)
        view = await asyncio.to_thread(service(request).tasks, wanted, before, limit)
        params = {**wanted.query(), "before": before, "task": task}
        return html(render("tasks.html", view=view, who=who, params=params))

    @router.get("/fragments/tasks/{task_id}", include_in_schema=False, dependencies=[read])
    async def task_fragment(task_id: TaskId, request: Request) -> HTMLResponse:
        who = (await identity(request)).session()
        detail = await asyncio.to_thread(service(request).task, task_id)
        return html(render("task.html", detail=detail, who=who))

    return router
