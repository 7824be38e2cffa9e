"""Authentication: bearer tokens with scopes, each route declaring the scope it needs.

Routes say `dependencies=[requires(Scope.POP)]`; nothing is guessed from a path. With
authentication off (the loopback default) the check lets every request through.

The token is checked before anything else about the request (`AuthenticatedRoute`): without a known
token a route answers 401, with one lacking its scope 403, whatever else is wrong with the request.
A dependency alone cannot promise that: FastAPI parses the body before it solves any dependency,
and solves the router's own (the unknown-query-parameter guard) before the route's. So the route
checks the token first and marks the request admitted; the dependency then only declares the
route's security in OpenAPI (and checks the token itself on a route built some other way). What
the middleware refuses before routing (text no database can store) is answered here too, after the
token: only an oversized body (413) is refused before authentication, while it streams in.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

import structlog
from fastapi import Depends, HTTPException, Request, Response, params, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from baton.core.settings import Settings
from baton.core.tokens import Scope, grants
from baton.service.app_services import AppServices
from baton.service.token_cache import TokenCache

bearer = HTTPBearer(auto_error=False, description="`baton token create --name NAME --scope ...`")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

ADMITTED = "baton.admitted"  # request scope key: the scope this request's token was found to grant
UNSTORABLE = "baton.unstorable"  # request scope key: (location, problem) the middleware found in the request


async def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None) -> tuple[str, list[str]]:
    """The token's (name, scopes), or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "authorization: a bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    cache: TokenCache = request.app.state.token_cache
    found = cache.cached(credentials.credentials)
    if found is None:  # a database look-up blocks: do it in the thread pool
        services: AppServices = request.app.state.app_services
        found = await run_in_threadpool(services.find_token, credentials.credentials)
    if found is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "authorization: unknown token", headers={"WWW-Authenticate": "Bearer"}
        )
    return found


async def admit(request: Request, needed: Scope) -> None:
    """Nothing when authentication is off or this request was admitted for `needed` already; else
    401 without a known token, 403 when it lacks `needed` (admin grants every scope)."""
    if request.scope.get(ADMITTED) is needed:
        return
    settings: Settings = request.app.state.settings
    if not settings.auth_required:
        return
    name, scopes = await authenticate(request, await bearer(request))
    if not grants(scopes, needed):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token '{name}' lacks the '{needed.value}' scope")
    structlog.contextvars.bind_contextvars(token=name)
    request.scope[ADMITTED] = needed


def requires(scope: Scope) -> Any:
    """A route dependency: a token granting `scope` (admin grants every scope)."""

    # `credentials` declares the bearer scheme in OpenAPI; admit reads the header itself.
    async def check(request: Request, credentials: Credentials) -> None:
        await admit(request, scope)

    check.required_scope = scope  # type: ignore[attr-defined]  # read by AuthenticatedRoute and the tests
    return Depends(check)


READ = requires(Scope.READ)
POP = requires(Scope.POP)
PUSH = requires(Scope.PUSH)
ADMIN = requires(Scope.ADMIN)


def required_scope(dependencies: Sequence[params.Depends]) -> Scope | None:
    """The scope a route's `requires` dependency names (None: a public route)."""
    scopes = [getattr(dependency.dependency, "required_scope", None) for dependency in dependencies]
    return next((scope for scope in scopes if scope is not None), None)


def unstorable(location: tuple[str | int, ...], problem: str) -> RequestValidationError:
    """The 422 for text no database can store, in FastAPI's validation shape as every other 422."""
    return RequestValidationError(
        [{"loc": location, "msg": f"{problem} (which cannot be stored)", "type": "value_error"}]
    )


class AuthenticatedRoute(APIRoute):
    """A route that admits the request's token for its scope before FastAPI reads the body, the
    parameters or any dependency; then refuses what the middleware found unstorable."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        needed = required_scope(self.dependencies)

        async def route(request: Request) -> Response:
            if needed is not None:
                await admit(request, needed)
            problem = request.scope.get(UNSTORABLE)
            if problem is not None:
                raise unstorable(*problem)
            return await handler(request)

        return route
