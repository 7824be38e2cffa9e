"""One HTTP client per outside service: pooled connections, timeouts, retries with capped backoff,
and an outage tracker (core/outages.py) that logs once when the service starts failing and once when
it answers again.

A call either returns what the service answered (parsed) or raises `OutsideServiceError` after its
retries; it never logs a traceback per attempt. Retried: connection errors, timeouts and 5xx answers.
Not retried: any other answer the caller did not expect (a 4xx): the service is up but Baton cannot use
what it says, which is a failure all the same. A 404 is an answer, not a failure, where the caller
asks for `fetch_or_none` (an object that does not exist).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import httpx
from pydantic import TypeAdapter, ValidationError

from baton.core.backoff import Backoff
from baton.core.diagnosis import reason as connection_reason
from baton.core.errors import OutsideServiceError
from baton.core.outages import service_outages

T = TypeVar("T")
Outcome = Literal["ok", "retry", "error"]
# Told of every call's end ("ok" or "error") and of every attempt that will be retried ("retry").
Observer = Callable[[str, Outcome], None]
Params = Mapping[str, Any]
NOT_FOUND = object()  # an answer the caller takes for "there is no such thing"


def is_not_found(response: httpx.Response) -> bool:
    return response.status_code == 404


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` more attempts after the first, waiting `initial`, doubling, at most `maximum` seconds."""

    retries: int = 3
    initial: float = 0.2
    maximum: float = 5.0


class Unauthorized(Exception):
    """A 401 the caller handles itself (Bytes logs in again)."""


class ServiceClient:
    """A shared, thread-safe HTTP client for one service (httpx.Client with a bounded connection pool)."""

    def __init__(
        self,
        service: str,
        base_url: str,
        *,
        timeout: float = 10.0,
        max_connections: int = 10,
        retry: RetryPolicy | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.service = service
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.observer = observer
        self.outages = service_outages(service, self.base_url)
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            headers={"User-Agent": "baton"},
        )

    @property
    def headers(self) -> httpx.Headers:
        return self._client.headers

    def close(self) -> None:
        self._client.close()

    def fetch(
        self,
        method: str,
        path: str,
        answer: TypeAdapter[T],
        *,
        params: Params | None = None,
        json: Any = None,
        data: Mapping[str, str] | None = None,
        raise_unauthorized: bool = False,
    ) -> T:
        """The answer parsed; any status but 2xx is a failure (`OutsideServiceError`), except a 401 with
        `raise_unauthorized`: that raises `Unauthorized` for the caller to log in again."""
        result = self._call(method, path, answer, params, json, data, missing=None, unauthorized=raise_unauthorized)
        return cast(T, result)

    def fetch_or_none(
        self,
        method: str,
        path: str,
        answer: TypeAdapter[T],
        *,
        params: Params | None = None,
        json: Any = None,
        raise_unauthorized: bool = False,
        missing: Callable[[httpx.Response], bool] = is_not_found,
    ) -> T | None:
        """As `fetch`, but an answer `missing` recognises (a 404) is None: the thing asked for does not exist."""
        result = self._call(method, path, answer, params, json, None, missing=missing, unauthorized=raise_unauthorized)
        return None if result is NOT_FOUND else cast(T, result)

    def _call(
        self,
        method: str,
        path: str,
        answer: TypeAdapter[T],
        params: Params | None,
        json: Any,
        data: Mapping[str, str] | None,
        *,
        missing: Callable[[httpx.Response], bool] | None,
        unauthorized: bool,
    ) -> Any:
        backoff = Backoff(initial=self.retry.initial, maximum=self.retry.maximum)
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._client.request(method, path, params=params, json=json, data=data)
            except httpx.RequestError as exc:
                failure, retryable = connection_reason(exc), isinstance(exc, httpx.TransportError)
            else:
                status = response.status_code
                if status == 401 and unauthorized:
                    raise Unauthorized()
                if status < 300:
                    return self._answered(method, path, answer, response)
                if missing is not None and missing(response):
                    return self._answered(method, path, answer, None)
                failure, retryable = f"answered {status} to {method} {path}", status >= 500
            if retryable and attempt <= self.retry.retries:
                self._observe("retry")
                time.sleep(backoff.next())
                continue
            raise self._failed(failure)

    def _answered(self, method: str, path: str, answer: TypeAdapter[T], response: httpx.Response | None) -> Any:
        result: Any = NOT_FOUND
        if response is not None:
            try:
                result = answer.validate_json(response.content) if response.content else answer.validate_python(None)
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(part) for part in problem["loc"]) or "the body"
                unreadable = f"answered what Baton cannot read to {method} {path} ({where}: {problem['msg']})"
                raise self._failed(unreadable) from None
        # A call reports as of its end (it retried for seconds already): any answer ends an outage.
        self.outages.succeeded(self.outages.mark)
        self._observe("ok")
        return result

    def _failed(self, reason: str) -> OutsideServiceError:
        self.outages.failed(self.outages.mark, reason)
        self._observe("error")
        return OutsideServiceError(self.service, reason)

    def _observe(self, outcome: Outcome) -> None:
        if self.observer is not None:
            self.observer(self.service, outcome)
