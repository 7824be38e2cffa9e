"""Authentication: bearer tokens with scopes, each route declaring the scope it needs.

Routes say `dependencies=[requires(Scope.POP)]`; nothing is guessed from a path. With
authentication off (the loopback default) the check lets every request through.
"""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from baton.core.settings import Settings
from baton.service.app_services import AppServices
from baton.service.tokens import Scope, TokenCache, grants

bearer = HTTPBearer(auto_error=False, description="`baton token create --name NAME --scope ...`")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


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


def requires(scope: Scope) -> Any:
    """A route dependency: a token granting `scope` (admin grants every scope)."""

    async def check(request: Request, credentials: Credentials) -> None:
        settings: Settings = request.app.state.settings
        if not settings.auth_required:
            return
        name, scopes = await authenticate(request, credentials)
        if not grants(scopes, scope):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"token '{name}' lacks the '{scope.value}' scope")
        structlog.contextvars.bind_contextvars(token=name)

    check.required_scope = scope  # type: ignore[attr-defined]  # read by the test that every route has one
    return Depends(check)


READ = requires(Scope.READ)
POP = requires(Scope.POP)
PUSH = requires(Scope.PUSH)
ADMIN = requires(Scope.ADMIN)
