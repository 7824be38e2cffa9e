"""Who sends the hot path's statements, for the API's event loop.

- `PostgresExecutor`: psycopg's async connection pool in autocommit; each statement is compiled
  once and sent as one round trip (psycopg prepares it server-side after a few uses). No thread hop,
  no ORM, no transaction round trips; `data` comes back as JSON text and goes to the client as is.
  Concurrent pops of one target share a statement (`popbatch.py`, unless BATON_GROUP_POPS=false).
  Pops with filters (compiled per request) run on the SQLAlchemy engine in a thread.
- `SQLiteExecutor`: the same statements through SQLAlchemy (the store-level ones, built once), on
  the event loop's thread while SQLite's write lock is free at once, else on one dedicated thread that
  waits for it (see the class).
- `ThreadExecutor`: the same statements through SQLAlchemy on dedicated threads (the PostgreSQL
  executor's fallback).

All return plain dicts (the statements' RETURNING columns) and raise Baton's errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import cache
from typing import Any, Protocol, TypeVar

import orjson
import psycopg
from psycopg.rows import TupleRow, dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from baton.core import deadline
from baton.core.filters import FilterTree
from baton.core.model import TaskStatus
from baton.core.queueing import PopTarget, PushRequest, PushResult
from baton.core.receipts import KeyedPop, Settlement
from baton.storage import deduplication, queues, receipts, statements
from baton.storage.engine import Store
from baton.storage.errors import translated
from baton.storage.filters import compile_tree
from baton.storage.popbatch import PopBatcher
from baton.storage.push import id_conflict, push_params, push_result

T = TypeVar("T")
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


class QueueExecutor(Protocol):
    async def pop(
        self,
        target: PopTarget,
        *,
        limit: int,
        now: datetime,
        tree: FilterTree | None = None,
        caps: bool = False,
        receipt: uuid.UUID | None = None,
        keyed: KeyedPop | None = None,
    ) -> list[dict[str, Any]]: ...

    async def pop_together(
        self,
        target: PopTarget,
        *,
        limit: int,
        now: datetime,
        tree: FilterTree | None = None,
        caps: bool = False,
        receipt: uuid.UUID | None = None,
    ) -> list[dict[str, Any]]: ...

    async def settle(self, settlement: Settlement, now: datetime) -> int: ...

    async def push(self, request: PushRequest, now: datetime) -> PushResult: ...

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]: ...

    async def task(self, task_id: uuid.UUID) -> dict[str, Any]:
        """One task's record (`data` as JSON text); NotFoundError when there is none."""
        ...

    async def queue_exists(self, queue_id: str) -> bool: ...

    async def any_caps(self) -> bool: ...

    async def close(self) -> None: ...


class ThreadExecutor:
    """The statements through SQLAlchemy, each in its own transaction on one of `threads` dedicated
    threads."""

    def __init__(self, store: Store, threads: int = 1) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="baton-db")

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self._pool.submit(work))

    def _in_transaction(self, unit: Callable[[Connection], T]) -> T:
        with translated(), self.store.engine.begin() as conn:
            return unit(conn)

    async def _transaction(self, unit: Callable[[Connection], T]) -> T:
        """Run `unit` in a transaction of its own, on a database thread."""
        return await self._run(lambda: self._in_transaction(unit))

    async def pop(
        self,
        target: PopTarget,
        *,
        limit: int,
        now: datetime,
        tree: FilterTree | None = None,
        caps: bool = False,
        receipt: uuid.UUID | None = None,
        keyed: KeyedPop | None = None,
    ) -> list[dict[str, Any]]:
        condition = compile_tree(tree, self.store.dialect) if tree is not None else None
        stamp = receipt or uuid.uuid4()
        if keyed is not None:
            return await self._transaction(
                lambda conn: receipts.keyed_pop(
                    conn, target, keyed, receipt=stamp, limit=limit, now=now, condition=condition, caps=caps
                )
            )
        return await self._transaction(
            lambda conn: queues.pop(
                conn, target, limit=limit, now=now, condition=condition, caps=caps, raw_data=True, receipt=stamp
            )
        )

    async def pop_together(
        self,
        target: PopTarget,
        *,
        limit: int,
        now: datetime,
        tree: FilterTree | None = None,
        caps: bool = False,
        receipt: uuid.UUID | None = None,
    ) -> list[dict[str, Any]]:
        """A boefje pop that hands out a deduplication group together, in one statement (deduplication.py)."""
        stamp = receipt or uuid.uuid4()
        return await self._transaction(
            lambda conn: deduplication.pop_together(
                conn, target, limit=limit, now=now, tree=tree, caps=caps, raw_data=True, receipt=stamp
            )
        )

    async def settle(self, settlement: Settlement, now: datetime) -> int:
        return await self._transaction(lambda conn: receipts.settle(conn, settlement, now))

    async def push(self, request: PushRequest, now: datetime) -> PushResult:
        return await self._transaction(lambda conn: queues.push(conn, request, now, raw_data=True))

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]:
        return await self._transaction(lambda conn: queues.change_status(conn, task_id, requested, now, raw_data=True))

    async def task(self, task_id: uuid.UUID) -> dict[str, Any]:
        return await self._transaction(lambda conn: queues.task_record(conn, task_id, raw_data=True))

    async def queue_exists(self, queue_id: str) -> bool:
        return await self._transaction(
            lambda conn: conn.execute(statements.queue_exists(), {"queue_": queue_id}).first() is not None
        )

    async def any_caps(self) -> bool:
        return await self._transaction(lambda conn: bool(conn.execute(statements.any_caps()).scalar()))

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


def _is_busy(exc: OperationalError) -> bool:
    return "locked" in str(exc.orig) or "busy" in str(exc.orig)


class SQLiteExecutor(ThreadExecutor):
    """SQLite: each statement runs on the event loop's own thread when the write lock is free at
    once, else on the database thread, which waits for it (busy_timeout).

    A SQLite statement of the hot path takes a fraction of a millisecond, less than handing it to a
    thread and back: the thread hop and the two threads taking turns at the GIL cost more than the
    work. What must never happen is the event loop waiting for a lock another writer holds (a
    scheduler thread, another process): so the loop's own connection has busy_timeout 0, and a
    `BEGIN IMMEDIATE` that finds the lock taken hands the unit to the thread, before anything ran.
    Writers are serialised either way; every statement and guarantee is the same.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store, threads=1)
        self._inline: Connection | None = None

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

    async def _transaction(self, unit: Callable[[Connection], T]) -> T:
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
            return await super()._transaction(unit)
        try:
            with transaction:
                return unit(conn)
        except OperationalError:
            self._forget_loop_connection()  # the file went away or broke: start afresh next time
            raise

    async def close(self) -> None:
        self._forget_loop_connection()
        await super().close()


@cache
def _compiled(statement_key: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """SQL text and default parameters of one hot statement for psycopg, compiled once."""
    kind = statement_key[0]
    if kind == "pop":
        _, by_queue, fair, caps = statement_key
        statement: Any = statements.plain_pop(by_queue, fair, "postgresql", caps, raw_data=True)
    elif kind == "together":
        _, by_queue, fair, caps = statement_key
        statement = deduplication.plain_together(by_queue, fair, "postgresql", caps, raw_data=True)
    elif kind == "push":
        statement = statements.push_postgresql(statement_key[1], raw_data=True)
    elif kind == "queue_exists":
        statement = statements.queue_exists()
    elif kind == "any_caps":
        statement = statements.any_caps()
    elif kind == "task":
        statement = statements.task_by_id(raw_data=True)
    else:
        statement = statements.change_status(TaskStatus(statement_key[1]), raw_data=True)
    compiled = statement.compile(dialect=statements.dialect_of("postgresql"))
    return str(compiled), dict(compiled.params)


async def _reconnect_again(pool: AsyncConnectionPool[Any]) -> None:
    """The pool gave up replacing a connection (the database is down): try again now. `check()`
    lets the pool grow back by one connection (a no-op while another attempt runs), so while the
    database is down some attempt is never more than RECONNECT_SECONDS away."""
    if not pool.closed:
        await pool.check()


class PostgresExecutor:
    """Hot statements on psycopg's async pool; anything unusual on the SQLAlchemy engine."""

    def __init__(self, store: Store, max_connections: int = 10, group_pops: bool = True) -> None:
        self.store = store
        # None: every pop its own statement.
        self.batcher = PopBatcher() if group_pops else None
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
        self._fallback = ThreadExecutor(store, threads=4)
        self._opened = False

    async def _ensure_open(self) -> None:
        if not self._opened:
            await self.pool.open(wait=False)
            self._opened = True

    @contextlib.asynccontextmanager
    async def _connection(self, until: float | None = None) -> AsyncIterator[psycopg.AsyncConnection[TupleRow]]:
        """A pooled connection, waited for until `until` (time.monotonic()) at most: the request's deadline."""
        if until is None:
            until = deadline.current(CONNECTION_WAIT_SECONDS)
        async with self.pool.connection(timeout=max(0.0, until - time.monotonic())) as conn:
            try:
                yield conn
            finally:
                if conn.broken:
                    # The server went away (a restart, a failover), and the pool's idle connections
                    # with it: replace them all now, as SQLAlchemy invalidates its pool, rather than
                    # fail one more request on each.
                    await self.pool.drain()

    async def _fetch(
        self, key: tuple[Any, ...], params: dict[str, Any], until: float | None = None
    ) -> list[dict[str, Any]]:
        await self._ensure_open()
        sql, defaults = _compiled(key)
        with translated():
            return await self._execute(sql, {**defaults, **params}, until)

    async def _execute(self, sql: str, params: dict[str, Any], until: float | None) -> list[dict[str, Any]]:
        async with self._connection(until) as conn:
            cursor = conn.cursor(binary=True)  # binary results: no text parsing of uuids and timestamps
            await cursor.execute(sql, params)
            rows: list[dict[str, Any]] = await cursor.fetchall()  # type: ignore[assignment]  # dict_row
            return rows

    async def pop(
        self,
        target: PopTarget,
        *,
        limit: int,
        now: datetime,
        tree: FilterTree | None = None,
        caps: bool = False,
        receipt: uuid.UUID | None = None,
        keyed: KeyedPop | None = None,
    ) -> list[dict[str, Any]]:
        if tree is not None or keyed is not None:
            return await self._fallback.pop(
                target, limit=limit, now=now, tree=tree, caps=caps, receipt=receipt, keyed=keyed
            )
        key = ("pop", target.queue is not None, target.fair, caps)
        # The statement a batch sends is its last waiter's: its receipt (the rows say which) and its
        # deadline, the latest of the batch's.
        until = deadline.current(CONNECTION_WAIT_SECONDS)
        stamp = receipt or uuid.uuid4()

        async def claim(count: int) -> list[dict[str, Any]]:
            params = {"queue_": target.queue, "type_": target.type, "limit_": count, "now_": now, "receipt_": stamp}
            return queues.sort_popped(await self._fetch(key, params, until), target)

        if self.batcher is None or caps:
            # With caps, one statement per pop: a batch would count an organisation's in-flight
            # tasks once for all its pops and could overshoot `max_in_flight`.
            return await claim(limit)
        return await self.batcher.pop(target, limit, claim)

    async def pop_together(
        self,
        target: PopTarget,
        *,
        limit: int,
        now: datetime,
        tree: FilterTree | None = None,
        caps: bool = False,
        receipt: uuid.UUID | None = None,
    ) -> list[dict[str, Any]]:
        """One statement on the pool, as the pop (not grouped with other pops: each has its own head)."""
        stamp = receipt or uuid.uuid4()
        if tree is not None:
            return await self._fallback.pop_together(target, limit=limit, now=now, tree=tree, caps=caps, receipt=stamp)
        params = {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now, "receipt_": stamp}
        rows = await self._fetch(("together", target.queue is not None, target.fair, caps), params)
        return queues.sort_popped(rows, target)

    async def push(self, request: PushRequest, now: datetime) -> PushResult:
        params = push_params(request, now, data=orjson.dumps(request.data).decode())
        try:
            rows = await self._fetch(("push", request.on_duplicate), params)
        except psycopg.errors.UniqueViolation as exc:
            raise id_conflict(request) from exc
        return push_result(rows[0] if rows else None, request)

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]:
        try:
            rows = await self._fetch(("change_status", requested.value), {"id_": task_id, "now_": now})
        except psycopg.errors.UniqueViolation as exc:
            raise queues.cannot_requeue(task_id) from exc
        if rows:
            return rows[0]
        return await self._fallback.change_status(task_id, requested, now)  # says why: 404 or 409

    async def task(self, task_id: uuid.UUID) -> dict[str, Any]:
        rows = await self._fetch(("task",), {"id_": task_id})
        if not rows:
            raise queues.unknown_task(task_id)
        return rows[0]

    async def queue_exists(self, queue_id: str) -> bool:
        return bool(await self._fetch(("queue_exists",), {"queue_": queue_id}))

    async def settle(self, settlement: Settlement, now: datetime) -> int:
        return await self._fallback.settle(settlement, now)

    async def any_caps(self) -> bool:
        rows = await self._fetch(("any_caps",), {})
        return bool(rows and next(iter(rows[0].values())))

    async def close(self) -> None:
        if self._opened:
            await self.pool.close()
        await self._fallback.close()


def executor_for(store: Store, group_pops: bool = True) -> QueueExecutor:
    return PostgresExecutor(store, group_pops=group_pops) if store.is_postgresql else SQLiteExecutor(store)
