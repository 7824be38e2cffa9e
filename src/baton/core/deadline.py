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
from collections.abc import Callable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar, cast

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


async def within(work: Coroutine[Any, Any, T], default_seconds: float, on_late: OnLate | None = None) -> T:
    """`work`'s result if it comes before the deadline in force, else DatabaseUnavailableError (503);
    `work` then runs on, and `on_late` receives its outcome when it ends.

    `work` runs in the caller's own task, stepped here as a task would step it: no task, no timer
    while it finishes without waiting (SQLite's pops on the event loop's thread), one timer for all
    its waits otherwise (a pop costs a few microseconds more, not a task's tens). At the deadline it
    is handed, mid-way, to a task of its own that finishes it. A cancellation of the caller's task
    reaches the work, as from a plain `await`."""
    try:
        waiting = work.send(None)
    except StopIteration as finished:
        return cast(T, finished.value)
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None
    wake: asyncio.Future[None] | None = None

    expired = False

    def woken(_: Any = None) -> None:
        if wake is not None and not wake.done():
            wake.set_result(None)

    def expire() -> None:
        nonlocal expired
        expired = True
        woken()

    try:
        while True:
            try:
                if waiting is None:  # a bare yield (asyncio.sleep(0)): step on in the next round
                    await asyncio.sleep(0)
                elif not waiting.done():
                    if timer is None:
                        timer = loop.call_at(loop.time() + remaining(default_seconds), expire)
                    if not expired:
                        wake = loop.create_future()
                        waiting.add_done_callback(woken)
                        try:
                            await wake
                        finally:
                            waiting.remove_done_callback(woken)
                    if not waiting.done():  # the deadline, not the work, woke us
                        _finish_later(work, waiting, on_late)
                        raise too_late(default_seconds)
            except asyncio.CancelledError as cancelled:
                # The task is cancelled (by its owner, or by a timeout inside the work: asyncio.timeout
                # cancels the current task): the work gets it, as it would from a plain `await`.
                if waiting is not None and not waiting.done() and waiting.cancel():
                    continue  # the work sees its future cancelled when it steps on
                try:
                    waiting = work.throw(cancelled)
                except StopIteration as finished:
                    return cast(T, finished.value)
                continue
            if waiting is not None:
                waiting._asyncio_future_blocking = False  # as a task does before stepping on
            try:
                waiting = work.send(None)
            except StopIteration as finished:
                return cast(T, finished.value)
    finally:
        if timer is not None:
            timer.cancel()


def _finish_later(work: Coroutine[Any, Any, Any], waiting: Any, on_late: OnLate | None) -> None:
    """Step `work` on to its end in a task of its own, from where it waits on `waiting`."""
    task = asyncio.ensure_future(_resume(work, waiting))
    task.add_done_callback(_consume if on_late is None else lambda done: _late(done, on_late))


async def _resume(work: Coroutine[Any, Any, T], waiting: Any) -> T:
    while True:
        if waiting is None:
            await asyncio.sleep(0)
        else:
            with contextlib.suppress(BaseException):  # the work reads the outcome itself (result())
                await asyncio.wait((waiting,))
            waiting._asyncio_future_blocking = False
        try:
            waiting = work.send(None)
        except StopIteration as finished:
            return cast(T, finished.value)


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" for abandoned work


def _late(task: asyncio.Future[Any], on_late: OnLate) -> None:
    if task.cancelled():
        on_late(None, asyncio.CancelledError())
        return
    exc = task.exception()
    on_late(None if exc is not None else task.result(), exc)
