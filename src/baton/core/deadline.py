"""One deadline per request: how long a request may wait for the database, whatever it tries.

A request that needs the database answers within BATON_DB_WAIT_SECONDS, or 503 with Retry-After:
the middleware starts the request's deadline, and every wait for the database on its way (a pooled
connection, a statement, a second path after the first failed) takes what remains of that one
deadline, not a fresh allowance of its own.

Work abandoned at the deadline is not cancelled: a statement already sent runs to its end (a
cancelled psycopg statement would wait up to 10 s for the server to confirm the cancel, and its
outcome would stay unknown). `within` hands its outcome to `on_late` instead, so a pop that
committed after its client was answered 503 can hand its tasks back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from baton.core.errors import DatabaseUnavailableError

T = TypeVar("T")
# The request's deadline (time.monotonic()); None outside a request: each call then gets its own.
_DEADLINE: ContextVar[float | None] = ContextVar("baton_deadline", default=None)
TOO_LATE = "database did not answer within {seconds:g} s (BATON_DB_WAIT_SECONDS); retry later"
#: What becomes of work abandoned at the deadline: its result, or the exception it raised.
OnLate = Callable[[Any, BaseException | None], None]


def begin(seconds: float) -> None:
    """Start the current request's deadline, `seconds` from now."""
    _DEADLINE.set(time.monotonic() + seconds)


@contextlib.contextmanager
def starting(seconds: float) -> Iterator[None]:
    """A deadline of its own for what runs inside (a long-poll's next attempt, after a wait)."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current(default_seconds: float) -> float:
    """The deadline in force (time.monotonic()): the request's, or `default_seconds` from now."""
    deadline = _DEADLINE.get()
    return time.monotonic() + default_seconds if deadline is None else deadline


def remaining(default_seconds: float) -> float:
    """Seconds left of the deadline in force (never below 0)."""
    return max(0.0, current(default_seconds) - time.monotonic())


class TooLateError(DatabaseUnavailableError):
    """The deadline passed before the database answered (503, as any other outage)."""


def too_late(seconds: float) -> TooLateError:
    return TooLateError(TOO_LATE.format(seconds=seconds), "no answer before the request's deadline")


async def within(work: Awaitable[T], default_seconds: float, on_late: OnLate | None = None) -> T:
    """`work`'s result if it comes before the deadline in force, else DatabaseUnavailableError (503);
    `work` then runs on, and `on_late` receives its outcome when it ends."""
    task = asyncio.ensure_future(work)
    seconds = remaining(default_seconds)
    if not task.done():
        done, _ = await asyncio.wait((task,), timeout=seconds)
        if not done:
            if on_late is not None:
                task.add_done_callback(lambda finished: _late(finished, on_late))
            else:
                task.add_done_callback(_consume)
            raise too_late(default_seconds)
    return task.result()


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" for abandoned work


def _late(task: asyncio.Future[Any], on_late: OnLate) -> None:
    if task.cancelled():
        on_late(None, asyncio.CancelledError())
        return
    exc = task.exception()
    on_late(None if exc is not None else task.result(), exc)
