"""Pure ASGI middleware: a request id per request (X-Request-ID in and out), the request's one
deadline for the database (BATON_DB_WAIT_SECONDS, core/deadline.py), one access log line, 413 for
bodies over the limit (counted as they stream in: Content-Length may be absent or lie), text that
no database can store (NUL characters, lone UTF-16 surrogates) found and handed to the route, which
answers 422 after authenticating (`security.AuthenticatedRoute`), and a job runner's plain requests
(pop, push, a task read or PATCHed) answered without FastAPI's routing (`fastpath.py`)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from baton.api import fastpath
from baton.api.security import UNSTORABLE
from baton.core import deadline
from baton.core.logging import get_logger

log = get_logger("baton.api")


def _unstorable(text: str) -> str | None:
    """Why neither database can store this text (PostgreSQL refuses NUL; nobody can encode a lone
    surrogate as UTF-8), or None."""
    if "\x00" in text:
        return "contains a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone UTF-16 surrogate"
    return None


def _printable(key: str) -> str:
    return key.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


Location = tuple[str | int, ...]


def _first_unstorable(value: Any, where: Location) -> tuple[Location, str] | None:
    if isinstance(value, str):
        problem = _unstorable(value)
        return (where, problem) if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            key_problem = _unstorable(key)
            if key_problem:
                return (*where, _printable(key)), f"key {key_problem}"
            found = _first_unstorable(item, (*where, key))
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_unstorable(item, (*where, index))
            if found:
                return found
    return None


def unstorable_in_body(body: bytes) -> tuple[Location, str] | None:
    """A JSON body holding text no database can store (checked only when an escape could hide it)."""
    if b"\\u" not in body:
        return None
    lowered = body.lower()
    if b"\\u0000" not in lowered and b"\\ud" not in lowered:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None  # not JSON: the route's own parsing answers that
    return _first_unstorable(document, ("body",))


def unstorable_in_url(scope: Scope) -> tuple[Location, str] | None:
    problem = _unstorable(scope.get("path", ""))
    if problem:
        return ("path",), problem
    query = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        return ("query",), "contains a NUL character"
    return None


class RequestContextMiddleware:
    """Pure ASGI: a request id per request (X-Request-ID in and out), one access log line, and a
    413 for bodies over the limit, counted as they stream in (Content-Length may be absent or lie)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, db_wait_seconds: float = 5.0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.db_wait_seconds = db_wait_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:128] or uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        deadline.begin(self.db_wait_seconds)  # every wait for the database takes from this one
        started = time.perf_counter()
        state: dict[str, Any] = {"status": 500}

        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(send, request_id)
            return

        # Read the whole body first (it is small by definition), so an oversize body is refused
        # before any handler sees it: FastAPI would turn a failure mid-parse into a 400.
        chunks: list[bytes] = []
        received = 0
        more_body = scope["method"] not in ("GET", "HEAD", "DELETE", "OPTIONS")
        while more_body:
            message = await receive()
            if message["type"] != "http.request":
                return  # client went away
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_body_bytes:
                await self._too_large(send, request_id)
                return
            chunks.append(chunk)
            more_body = message.get("more_body", False)
        body = b"".join(chunks)
        problem = unstorable_in_url(scope) or unstorable_in_body(body)
        if problem is not None:
            # Refused by the route (security.AuthenticatedRoute), after the token: 401 comes first.
            scope[UNSTORABLE] = problem
        replayed = False

        async def replay_receive() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            answered = False
            if problem is None:
                answered = await fastpath.answer(scope, body, send_with_id)
            if not answered:
                await self.app(scope, replay_receive, send_with_id)
        finally:
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=state["status"],
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )

    async def _too_large(self, send: Send, request_id: str) -> None:
        await self._reject(send, request_id, 413, f"body: larger than the limit of {self.max_body_bytes} bytes")

    async def _reject(self, send: Send, request_id: str, status_code: int, message: str) -> None:
        body = json.dumps({"detail": message, "message": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status_code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-request-id", request_id.encode("latin-1")),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
