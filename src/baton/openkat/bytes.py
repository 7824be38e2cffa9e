"""Bytes: when each boefje last ran on each object, read incrementally per organisation and boefje.

Bytes wants a bearer token from `POST /token` (a form with username and password,
bytes/bytes/api/root.py); an expired or unknown token answers 401, after which the client logs in again
once and repeats the call (as mula's `retry_with_login`). `GET /bytes/boefje_meta` (bytes/bytes/api/router.py)
lists runs by `started_at`, newest first with `descending=true`, `limit` and `offset`.

Bytes filters on `input_ooi` even when the parameter is absent: it then lists only runs WITHOUT an input
object (sql_meta_repository.py compares `input_ooi != "*"`, and the absent parameter is None). Every run
of a boefje, whatever its object, needs `input_ooi=*`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypeVar

from pydantic import TypeAdapter

from baton.core.errors import InvalidInputError
from baton.openkat.http import Params, ServiceClient, Unauthorized
from baton.openkat.models import BoefjeMeta, Token

T = TypeVar("T")
RUNS = TypeAdapter(list[BoefjeMeta])
TOKEN = TypeAdapter(Token)
EVERY_OBJECT = "*"


class BytesClient:
    def __init__(self, http: ServiceClient, username: str, password: str) -> None:
        self.http = http
        self._credentials = {"username": username, "password": password}
        self._lock = threading.Lock()
        self._token: str | None = None

    def login(self) -> None:
        token = self.http.fetch("POST", "/token", TOKEN, data=self._credentials).access_token
        with self._lock:
            self._token = token
            self.http.headers["Authorization"] = f"bearer {token}"

    def boefje_runs(
        self, organisation_id: str, boefje_id: str, *, since: datetime | None = None, page_size: int = 100
    ) -> Iterator[BoefjeMeta]:
        """The boefje's runs in the organisation on any object, newest start first, fetched a page at a time
        as the caller iterates, down to the runs started at `since` (included: a run seen before may come
        again, none is missed) or to the oldest. Runs started while the caller pages push older ones to
        later offsets, so a run may be seen twice but never skipped."""
        if since is not None and since.utcoffset() is None:
            raise InvalidInputError("since must be timezone-aware (Bytes' times are)")
        params: dict[str, Any] = {
            "organization": organisation_id,
            "boefje_id": boefje_id,
            "input_ooi": EVERY_OBJECT,
            "limit": page_size,
            "descending": "true",
        }
        offset = 0
        while True:
            page = self._fetch("/bytes/boefje_meta", {**params, "offset": offset})
            for run in page:
                if since is not None and run.started_at is not None and run.started_at < since:
                    return
                yield run
            if len(page) < page_size:
                return
            offset += page_size

    def last_run(self, organisation_id: str, boefje_id: str, input_ooi: str | None) -> BoefjeMeta | None:
        """The boefje's latest run on one object (mula's `get_last_run_boefje`: one call per object; many
        objects of one boefje are better read with `boefje_runs`); `input_ooi` None: its latest run without
        an object (Bytes then filters on its absence)."""
        params: dict[str, Any] = {
            "organization": organisation_id,
            "boefje_id": boefje_id,
            "limit": 1,
            "descending": "true",
        }
        if input_ooi is not None:
            params["input_ooi"] = input_ooi
        runs = self._fetch("/bytes/boefje_meta", params)
        return runs[0] if runs else None

    def _fetch(self, path: str, params: Params) -> list[BoefjeMeta]:
        if self._token is None:
            self.login()
        used = self._token
        try:
            return self.http.fetch("GET", path, RUNS, params=params, raise_unauthorized=True)
        except Unauthorized:
            with self._lock:
                stale = self._token == used  # another thread may have logged in already
            if stale:
                self.login()
            return self.http.fetch("GET", path, RUNS, params=params)
