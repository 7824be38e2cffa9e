"""Wake-ups for waiting pops: word that a queue may have a queued task now.

- PostgreSQL (`QueuedListener`): one LISTEN connection per API process, open while it has waiting
  pops, on the channel the triggers of migration 0007 notify at commit, whoever queued the task (an
  API replica, a scheduler process, recovery). Each notification names one queue. When the
  connection drops it reconnects with the one backoff policy; meanwhile `live` is False and waiters
  look for themselves every few seconds. Its attempts feed the database's outage tracker
  (storage/errors.py), which logs the outage; it logs nothing of its own for one.
- SQLite (`ChangeWatcher`): no NOTIFY. One connection of its own asks `PRAGMA data_version` every
  interval, a number that changes when any other connection (another process included) commits:
  one cheap query per interval per process, however many pops wait.

Either calls `on_queued(queue_id)` for a queue that may have work, `on_anything()` when it cannot
tell which (a change on SQLite; a reconnect, which may have missed notifications), and `on_lost()`
when announcements stop (`live` turned False: every waiter must start looking for itself).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import psycopg

from baton.core.backoff import Backoff, fresh
from baton.core.diagnosis import reason
from baton.core.logging import get_logger
from baton.storage.engine import Store
from baton.storage.errors import DATABASE

log = get_logger("baton.storage.queues.wakeups")

CHANNEL = "baton_queued"  # migration 0007's triggers notify it
# How often the listening connection is checked (by default; BATON_POP_LISTEN_CHECK_SECONDS): it is
# asked something (a connection a silent network cut off would wait for notifications forever), and
# closed after IDLE_CHECKS checks in a row found no waiter.
CHECK_SECONDS = 10.0
IDLE_CHECKS = 2
CONNECT_TIMEOUT_SECONDS = 10
APPLICATION_NAME = "baton wake-ups"  # how the connection shows in pg_stat_activity
# Reconnecting while pops wait: at most 1 s apart, so they hear of new tasks again within a second
# of the database taking connections (one attempt a second per API process meanwhile).
LISTEN_AGAIN = Backoff(initial=0.5, maximum=1.0)

OnQueued = Callable[[str], None]
OnAnything = Callable[[], None]
OnLost = Callable[[], None]
HasWaiters = Callable[[], bool]


class _Background:
    """One task on the event loop, cancelled on close."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def _launch(self, work: Any) -> None:
        self._task = asyncio.get_running_loop().create_task(work)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class QueuedListener(_Background):
    """PostgreSQL: LISTEN on one connection, open only while the process has waiting pops.

    Every notification wakes the listening backend and this process: a busy system, whose queues are
    not empty, has no waiters and should not pay that per push. So the first waiter opens the
    connection (`watch`), and it closes after IDLE_CHECKS checks in a row found no waiter. When it
    drops it reconnects with the one backoff policy while waiters remain."""

    def __init__(self, store: Store, check_seconds: float = CHECK_SECONDS) -> None:
        super().__init__()
        self._conninfo = store.address.conninfo
        self._check_seconds = check_seconds
        self._live = False
        self._wanted = asyncio.Event()  # some waiter wants announcements: connect (again)
        self._attempt: asyncio.Future[None] | None = None  # resolved when the next attempt to listen ends

    @property
    def live(self) -> bool:
        return self._live

    def start(self, on_queued: OnQueued, on_anything: OnAnything, on_lost: OnLost, has_waiters: HasWaiters) -> None:
        self._launch(self._run(on_queued, on_anything, on_lost, has_waiters))

    async def watch(self) -> None:
        """Before a waiter pops: returns once newly queued tasks will be announced, or once an attempt
        to listen failed (`live` False: the waiter looks for itself). While connecting or backing off
        after a failure it returns at once."""
        if self._live or self._wanted.is_set():
            return
        self._wanted.set()
        if self._attempt is None or self._attempt.done():
            self._attempt = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._attempt), CONNECT_TIMEOUT_SECONDS + 1)

    async def close(self) -> None:
        await super().close()
        self._live = False
        self._attempt_ended()  # nobody waits for a connection that will not come

    def _attempt_ended(self) -> None:
        if self._attempt is not None and not self._attempt.done():
            self._attempt.set_result(None)

    async def _run(
        self, on_queued: OnQueued, on_anything: OnAnything, on_lost: OnLost, has_waiters: HasWaiters
    ) -> None:
        backoff = fresh(LISTEN_AGAIN)
        while True:
            await self._wanted.wait()
            seen = DATABASE.mark
            try:
                await self._listen(on_queued, on_anything, has_waiters, backoff, seen)
                continue  # closed for want of waiters
            except psycopg.Error as exc:  # the database's outage: logged once by its tracker
                DATABASE.failed(seen, reason(exc))
            except Exception as exc:  # whatever it was, this task must not die: waiters rely on it
                if not backoff.failures_seen:  # once, not once per attempt
                    log.warning("cannot listen for queued tasks; waiting pops look every few seconds", error=str(exc))
            finally:
                self._attempt_ended()
            if self._live:
                self._live = False
                on_lost()  # waiters sleeping until a notification now look for themselves
            await asyncio.sleep(backoff.next())
            if not has_waiters():
                self._wanted.clear()  # the next waiter connects again

    async def _listen(
        self, on_queued: OnQueued, on_anything: OnAnything, has_waiters: HasWaiters, backoff: Backoff, seen: int
    ) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS, application_name=APPLICATION_NAME
        )
        async with conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self._live = True
            self._attempt_ended()
            DATABASE.succeeded(seen)
            backoff.reset()
            on_anything()  # waiters that looked for themselves meanwhile: tasks queued while nobody listened
            await self._relay(conn, on_queued, has_waiters)

    async def _relay(self, conn: psycopg.AsyncConnection[Any], on_queued: OnQueued, has_waiters: HasWaiters) -> None:
        """Until IDLE_CHECKS checks in a row found no waiter."""
        idle = 0
        while True:
            async for notification in conn.notifies(timeout=self._check_seconds):
                on_queued(notification.payload)
            idle = 0 if has_waiters() else idle + 1
            if idle >= IDLE_CHECKS:
                # No await from the check to here: a waiter arriving later finds `live` False and
                # `_wanted` clear, and connects anew before it pops.
                self._live = False
                self._wanted.clear()
                return
            await conn.execute("SELECT 1")  # a connection a silent network cut off is noticed


class ChangeWatcher(_Background):
    """SQLite: says "anything" when the file changed since the last look (`PRAGMA data_version`)."""

    def __init__(self, store: Store, interval: float) -> None:
        super().__init__()
        self._store = store
        self._interval = interval
        self._connection: Any = None

    @property
    def live(self) -> bool:
        return True  # it looks every interval itself: waiters need not

    def start(self, on_queued: OnQueued, on_anything: OnAnything, on_lost: OnLost, has_waiters: HasWaiters) -> None:
        self._launch(self._run(on_anything))

    async def watch(self) -> None:
        return  # it looks every interval whether or not anyone waits

    def _data_version(self) -> int | None:
        """The file's change counter as this connection sees it; None if the file cannot be read."""
        try:
            if self._connection is None:
                raw = self._store.engine.raw_connection()
                # The driver's connection, ours for good: data_version compares commits with this
                # connection's view, and SQLAlchemy would open a write transaction first.
                driver = raw.driver_connection
                raw.detach()
                self._connection = driver
            row = self._connection.execute("PRAGMA data_version").fetchone()
            return int(row[0])
        except Exception as exc:  # a broken file: forget the connection, wake everyone, try again later
            log.warning("cannot watch the SQLite file for queued tasks", error=str(exc))
            self._forget_connection()
            return None

    def _forget_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    async def _run(self, on_anything: OnAnything) -> None:
        seen = await asyncio.to_thread(self._data_version)
        try:
            while True:
                await asyncio.sleep(self._interval)
                version = await asyncio.to_thread(self._data_version)
                if version is None or version != seen:
                    on_anything()
                seen = version
        finally:
            await asyncio.to_thread(self._forget_connection)


def wakeups_for(
    store: Store, recheck_seconds: float, listen_check_seconds: float = CHECK_SECONDS
) -> QueuedListener | ChangeWatcher:
    if store.is_postgresql:
        return QueuedListener(store, listen_check_seconds)
    return ChangeWatcher(store, recheck_seconds)
