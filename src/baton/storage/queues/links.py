"""How the API's statements reach the database, per backend; what is sent is the queue door's
(`queue_door.py`).

A link sends two kinds of work, both raising Baton's errors (`errors.translated`):
- `fetch`: one statement of a fixed shape (a `Statement`: hashable, built once per dialect), its rows as
  dicts. On PostgreSQL it is compiled once and sent on psycopg's async pool in autocommit: one round
  trip, no thread hop, no ORM (psycopg prepares it server-side after a few uses).
- `transaction`: a unit of SQLAlchemy work in a transaction of its own (a pop with filters or a key, the
  settling of a receipt, the reason a status change was refused): on threads on PostgreSQL.

On SQLite both run through SQLAlchemy, on the event loop's thread while the write lock is free at once,
else on one dedicated thread that waits for it (see `SQLiteLink`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg.rows import TupleRow, dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from baton.core import deadline
from baton.storage.engine import Store
from baton.storage.errors import translated
from baton.storage.queues.push import as_dict
from baton.storage.queues.statements import Dialect, dialect_of

T = TypeVar("T")
Rows = list[dict[str, Any]]
# How long a request waits for one of the pool's connections. Statements take milliseconds, so a
# longer wait means the database is down (the pool cannot reconnect) or the process is overloaded:
# the request then fails with PoolTimeout, answered 503, instead of holding the client for psycopg's
# default of 30 s (as long as many clients' own timeouts).
CONNECTION_WAIT_SECONDS = 5.0
# How long the pool tries to replace a connection before it gives up and starts again at once
# (`_reconnect_again`). psycopg_pool doubles its delay between attempts for as long as this lasts
# (default 5 min: after a long outage the next attempt could come half a minute after the database is
# back); within 1 s it never waits more than 1 s between attempts.
RECONNECT_SECONDS = 1.0


class Statement(Hashable, Protocol):
    """A statement of a fixed shape: its parameters vary, its SQL does not."""

    def build(self, dialect: Dialect) -> Any: ...


class Link(Protocol):
    dialect: Dialect

    async def fetch(self, statement: Statement, params: dict[str, Any], until: float | None = None) -> Rows: ...

    async def transaction(self, unit: Callable[[Connection], T]) -> T: ...

    async def close(self) -> None: ...


@cache
def compiled(statement: Statement) -> tuple[str, dict[str, Any]]:
    """SQL text and default parameters of a statement for psycopg, compiled once."""
    built = statement.build("postgresql").compile(dialect=dialect_of("postgresql"))
    return str(built), dict(built.params)


class Threads:
    """SQLAlchemy units, each in a transaction of its own, on `threads` dedicated threads."""

    def __init__(self, store: Store, threads: int) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="baton-db")

    def _in_transaction(self, unit: Callable[[Connection], T]) -> T:
        with translated(), self.store.engine.begin() as conn:
            return unit(conn)

    async def transaction(self, unit: Callable[[Connection], T]) -> T:
        return await asyncio.wrap_future(self._pool.submit(self._in_transaction, unit))

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


async def _reconnect_again(pool: AsyncConnectionPool[Any]) -> None:
    """The pool gave up replacing a connection (the database is down): try again now. `check()`
    lets the pool grow back by one connection (a no-op while another attempt runs), so while the
    database is down some attempt is never more than RECONNECT_SECONDS away."""
    if not pool.closed:
        await pool.check()


class PostgresLink:
    dialect: Dialect = "postgresql"

    def __init__(self, store: Store, max_connections: int = 10) -> None:
        self.pool = AsyncConnectionPool(
            store.address.conninfo,
            min_size=1,
            max_size=max_connections,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
            timeout=CONNECTION_WAIT_SECONDS,
            reconnect_timeout=RECONNECT_SECONDS,
            reconnect_failed=_reconnect_again,
        )
        self._threads = Threads(store, threads=4)
        self._opened = False

    async def fetch(self, statement: Statement, params: dict[str, Any], until: float | None = None) -> Rows:
        """One statement on the pool, waiting for a connection until `until` (time.monotonic()) at most:
        by default the deadline in force (the request's: core/deadline.py)."""
        if not self._opened:
            await self.pool.open(wait=False)
            self._opened = True
        sql, defaults = compiled(statement)
        with translated():
            return await self._execute(
                sql, {**defaults, **params}, deadline.current(CONNECTION_WAIT_SECONDS) if until is None else until
            )

    async def _execute(self, sql: str, params: dict[str, Any], until: float) -> Rows:
        async with self._connection(until) as conn:
            cursor = conn.cursor(binary=True)  # binary results: no text parsing of uuids and timestamps
            await cursor.execute(sql, params)
            rows: Rows = await cursor.fetchall()  # type: ignore[assignment]  # dict_row
            return rows

    @contextlib.asynccontextmanager
    async def _connection(self, until: float) -> AsyncIterator[psycopg.AsyncConnection[TupleRow]]:
        """A pooled connection, waited for until `until` (time.monotonic()) at most."""
        async with self.pool.connection(timeout=max(0.0, until - time.monotonic())) as conn:
            try:
                yield conn
            finally:
                if conn.broken:
                    # The server went away (a restart, a failover), and the pool's idle connections
                    # with it: replace them all now, as SQLAlchemy invalidates its pool, rather than
                    # fail one more request on each.
                    await self.pool.drain()

    async def transaction(self, unit: Callable[[Connection], T]) -> T:
        return await self._threads.transaction(unit)

    async def close(self) -> None:
        if self._opened:
            await self.pool.close()
        await self._threads.close()


def _is_busy(exc: OperationalError) -> bool:
    return "locked" in str(exc.orig) or "busy" in str(exc.orig)


class SQLiteLink:
    """SQLite: each unit runs on the event loop's own thread when the write lock is free at once, else on
    the database thread, which waits for it (busy_timeout).

    A SQLite statement of the hot path takes a fraction of a millisecond, less than handing it to a
    thread and back: the thread hop and the two threads taking turns at the GIL cost more than the
    work. What must never happen is the event loop waiting for a lock another writer holds (a
    scheduler thread, another process): so the loop's own connection has busy_timeout 0, and a
    `BEGIN IMMEDIATE` that finds the lock taken hands the unit to the thread, before anything ran.
    Writers are serialised either way; every statement and guarantee is the same.
    """

    dialect: Dialect = "sqlite"

    def __init__(self, store: Store) -> None:
        self.store = store
        self._threads = Threads(store, threads=1)
        self._inline: Connection | None = None

    async def fetch(self, statement: Statement, params: dict[str, Any], until: float | None = None) -> Rows:
        built = _built_for_sqlite(statement)
        return await self.transaction(lambda conn: [as_dict(row) for row in conn.execute(built, params)])

    def _loop_connection(self) -> Connection:
        if self._inline is None:
            conn = self.store.engine.connect()
            conn.detach()  # its own, never back in the pool: no other user gets busy_timeout 0
            conn.exec_driver_sql("PRAGMA busy_timeout=0")
            conn.commit()
            self._inline = conn
        return self._inline

    def _forget_loop_connection(self) -> None:
        inline, self._inline = self._inline, None
        if inline is not None:
            with contextlib.suppress(Exception):  # a connection that failed may not close cleanly either
                inline.close()

    async def transaction(self, unit: Callable[[Connection], T]) -> T:
        with translated():
            return await self._inline_or_threaded(unit)

    async def _inline_or_threaded(self, unit: Callable[[Connection], T]) -> T:
        try:
            conn = self._loop_connection()
        except OperationalError:
            self._forget_loop_connection()
            raise
        try:
            transaction = conn.begin()
        except OperationalError as exc:
            if not _is_busy(exc):
                self._forget_loop_connection()
                raise
            conn.rollback()  # nothing began; leaves the connection ready for the next unit
            return await self._threads.transaction(unit)
        try:
            with transaction:
                return unit(conn)
        except OperationalError:
            self._forget_loop_connection()  # the file went away or broke: start afresh next time
            raise

    async def close(self) -> None:
        self._forget_loop_connection()
        await self._threads.close()


@cache
def _built_for_sqlite(statement: Statement) -> Any:
    """Built once: building a statement and SQLAlchemy's cache key for it took longer than running it."""
    return statement.build("sqlite")


def link_for(store: Store) -> Link:
    return PostgresLink(store) if store.is_postgresql else SQLiteLink(store)
