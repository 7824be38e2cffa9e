"""A Bytes stand-in: a user, bearer tokens and boefje runs (BoefjeMeta), speaking Bytes' wire format
for the calls Baton makes and the one a test makes to add runs (POST /bytes/boefje_meta).

Source: nl-kat-coordination bytes/bytes/api/root.py (POST /token: an OAuth2 password form, 401 with
WWW-Authenticate on bad credentials), bytes/bytes/auth.py (OAuth2PasswordBearer: no token answers 401
"Not authenticated", a bad or expired one 401 "Could not validate credentials"), bytes/bytes/api/__init__.py
(the API under /bytes), bytes/bytes/api/router.py (GET /bytes/boefje_meta) with the filter of
bytes/bytes/database/sql_meta_repository.py (an absent input_ooi lists only runs WITHOUT an input object;
"*" lists all; ordered by started_at) and the model of bytes/bytes/models.py (BoefjeMeta; times in UTC
with a "Z"). A request Bytes cannot validate answers 422 {"value": "<the errors>"} (root.py).
"""

from __future__ import annotations

import bisect
import itertools
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import OAuth2PasswordBearer
from pydantic import AwareDatetime, BaseModel

from harness.standins.common import Standin

oauth2_scheme = OAuth2PasswordBearer(tokenUrl="token")


class Boefje(BaseModel):
    id: str
    version: str | None = None


class BoefjeMetaIn(BaseModel):  # bytes/bytes/models.py BoefjeMeta
    id: uuid.UUID
    started_at: AwareDatetime
    ended_at: AwareDatetime
    boefje: Boefje
    input_ooi: str | None = None
    arguments: dict[str, Any]
    organization: str
    runnable_hash: str | None = None
    environment: dict[str, str] | None = None


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class BytesStandin(Standin):
    def __init__(self, username: str = "bytes-user", password: str = "bytes-secret") -> None:
        super().__init__("Bytes API stand-in")
        self.username = username
        self.password = password
        self.tokens: set[str] = set()
        self.runs: dict[str, list[dict[str, Any]]] = {}  # organisation -> its runs, oldest start first
        self.asked: list[dict[str, Any]] = []  # the query of every GET /bytes/boefje_meta, in order
        self._ids: set[str] = set()
        self._routes()

    # --- the state, as a test drives it ---

    def expire_tokens(self) -> None:
        """Every token given out so far stops working (as when they expire): the next call answers 401."""
        with self.lock:
            self.tokens.clear()

    def add_run(
        self,
        organisation_id: str,
        boefje_id: str,
        input_ooi: str | None,
        *,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        version: str | None = None,
        run_id: uuid.UUID | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A boefje run (BoefjeMeta); started now and ended a second later unless told."""
        started = started_at or datetime.now(UTC)
        identifier = str(run_id or uuid.uuid4())
        run: dict[str, Any] = {
            "id": identifier,
            "started_at": utc(started),
            "ended_at": utc(ended_at or started + timedelta(seconds=1)),
            "boefje": {"id": boefje_id, "version": version},
            "input_ooi": input_ooi,
            "arguments": arguments or {},
            "organization": organisation_id,
            "runnable_hash": None,
            "environment": None,
            "_started": started,
        }
        with self.lock:
            if identifier in self._ids:
                raise ValueError(f"run {identifier} exists already")
            self._ids.add(identifier)
            bisect.insort(self.runs.setdefault(organisation_id, []), run, key=lambda known: known["_started"])
        return run

    # --- the API ---

    def _authenticated(self, token: str = Depends(oauth2_scheme)) -> str:
        with self.lock:
            if token not in self.tokens:
                raise HTTPException(401, "Could not validate credentials", headers={"WWW-Authenticate": "Bearer"})
        return token

    def _routes(self) -> None:
        app = self.app

        @app.exception_handler(RequestValidationError)
        def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
            return JSONResponse({"value": str(exc.errors())}, status_code=422)

        @app.get("/health")
        def health() -> dict[str, Any]:
            return {"service": "bytes", "healthy": True, "version": "stand-in", "additional": None, "results": []}

        @app.post("/token", response_model=None)
        async def login(request: Request) -> Any:
            # OAuth2PasswordRequestForm, read by hand (python-multipart is not one of Baton's dependencies).
            form = parse_qs((await request.body()).decode())
            missing = [name for name in ("username", "password") if name not in form]
            if missing or "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
                fields = [{"type": "missing", "loc": ("body", name), "msg": "Field required"} for name in missing]
                return JSONResponse({"value": str(fields)}, status_code=422)
            username, password = form["username"][0], form["password"][0]
            if (username, password) != (self.username, self.password):
                raise HTTPException(401, "Incorrect username or password", headers={"WWW-Authenticate": "Bearer"})
            token = secrets.token_urlsafe(24)
            with self.lock:
                self.tokens.add(token)
            expires = datetime.now(UTC) + timedelta(minutes=15)
            return {"access_token": token, "token_type": "bearer", "expires_at": expires.isoformat()}

        @app.post("/bytes/boefje_meta", dependencies=[Depends(self._authenticated)])
        def create_boefje_meta(boefje_meta: BoefjeMetaIn) -> JSONResponse:
            try:
                self.add_run(
                    boefje_meta.organization,
                    boefje_meta.boefje.id,
                    boefje_meta.input_ooi,
                    started_at=boefje_meta.started_at,
                    ended_at=boefje_meta.ended_at,
                    version=boefje_meta.boefje.version,
                    run_id=boefje_meta.id,
                    arguments=boefje_meta.arguments,
                )
            except ValueError:
                failed = {"status": "failed", "message": "Integrity error: object might already exist"}
                return JSONResponse(failed, status_code=400)
            return JSONResponse({"status": "success"}, status_code=201)

        @app.get("/bytes/boefje_meta", dependencies=[Depends(self._authenticated)])
        def get_boefje_meta(
            organization: str,
            boefje_id: str | None = None,
            input_ooi: str | None = None,
            limit: int = 1,
            offset: int = 0,
            descending: bool = True,
        ) -> list[dict[str, Any]]:
            with self.lock:
                self.asked.append(
                    {"organization": organization, "boefje_id": boefje_id, "input_ooi": input_ooi, "limit": limit}
                )
                in_order = reversed(self.runs.get(organization, [])) if descending else self.runs.get(organization, [])
                runs = (
                    run
                    for run in in_order
                    if (boefje_id is None or run["boefje"]["id"] == boefje_id)
                    and (input_ooi == "*" or run["input_ooi"] == input_ooi)
                )
                page = list(itertools.islice(runs, offset, offset + limit))
            return [{k: v for k, v in run.items() if k != "_started"} for run in page]
