"""Who sends the hot path's statements, for the API's event loop.

- `PostgresExecutor`: psycopg's async connection pool in autocommit; each statement is compiled
  once and sent as one round trip (psycopg prepares it server-side after a few uses). No thread hop,
  no ORM, no transaction round trips; `data` comes back as JSON text and goes to the client as is.
  Pops with filters (compiled per request) run on the SQLAlchemy engine in a thread.
- `ThreadExecutor`: the same statements through SQLAlchemy on one dedicated thread. SQLite has one
  writer at a time anyway, so one thread serialises its writes without lock contention; the event
  loop never blocks on the database file.

Both return plain dicts (the statements' RETURNING columns) and raise Baton's errors.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import cache
from typing import Any, Protocol, TypeVar

import orjson
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import make_url

from baton.core.errors import ConflictError
from baton.core.filters import FilterTree
from baton.core.model import TaskStatus
from baton.storage import queues, statements
from baton.storage.engine import Store
from baton.storage.filters import compile_tree
from baton.storage.queues import PushRequest, PushResult
from baton.storage.statements import PopTarget

T = TypeVar("T")


class QueueExecutor(Protocol):
    async def pop(
        self, target: PopTarget, *, limit: int, now: datetime, tree: FilterTree | None = None, caps: bool = False
    ) -> list[dict[str, Any]]: ...

    async def push(self, request: PushRequest, now: datetime) -> PushResult: ...

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]: ...

    async def queue_exists(self, queue_id: str) -> bool: ...

    async def any_caps(self) -> bool: ...

    async def close(self) -> None: ...


class ThreadExecutor:
    """The statements through SQLAlchemy, on `threads` dedicated threads (1 for SQLite)."""

    def __init__(self, store: Store, threads: int = 1) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="baton-db")

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self._pool.submit(work))

    async def pop(
        self, target: PopTarget, *, limit: int, now: datetime, tree: FilterTree | None = None, caps: bool = False
    ) -> list[dict[str, Any]]:
        return await self._run(lambda: self.pop_now(target, limit=limit, now=now, tree=tree, caps=caps))

    def pop_now(
        self, target: PopTarget, *, limit: int, now: datetime, tree: FilterTree | None, caps: bool
    ) -> list[dict[str, Any]]:
        condition = compile_tree(tree, self.store.dialect) if tree is not None else None
        with self.store.engine.begin() as conn:
            return queues.pop(conn, target, limit=limit, now=now, condition=condition, caps=caps, raw_data=True)

    async def push(self, request: PushRequest, now: datetime) -> PushResult:
        def work() -> PushResult:
            with self.store.engine.begin() as conn:
                return queues.push(conn, request, now, raw_data=True)

        return await self._run(work)

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            with self.store.engine.begin() as conn:
                return queues.change_status(conn, task_id, requested, now, raw_data=True)

        return await self._run(work)

    async def queue_exists(self, queue_id: str) -> bool:
        def work() -> bool:
            with self.store.engine.connect() as conn:
                return conn.execute(statements.queue_exists(), {"queue_": queue_id}).first() is not None

        return await self._run(work)

    async def any_caps(self) -> bool:
        def work() -> bool:
            with self.store.engine.connect() as conn:
                return bool(conn.execute(statements.any_caps()).scalar())

        return await self._run(work)

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


@cache
def _compiled(statement_key: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """SQL text and default parameters of one hot statement for psycopg, compiled once."""
    kind = statement_key[0]
    if kind == "pop":
        _, by_queue, fair, caps = statement_key
        target = PopTarget(queue="?", fair=fair) if by_queue else PopTarget(type="?", fair=fair)
        statement: Any = statements.pop(target, "postgresql", caps=caps, raw_data=True)
    elif kind == "push":
        statement = statements.push_postgresql(statement_key[1], raw_data=True)
    elif kind == "queue_exists":
        statement = statements.queue_exists()
    elif kind == "any_caps":
        statement = statements.any_caps()
    else:
        statement = statements.change_status(TaskStatus(statement_key[1]), raw_data=True)
    compiled = statement.compile(dialect=statements.dialect_of("postgresql"))
    return str(compiled), dict(compiled.params)


def libpq_conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresExecutor:
    """Hot statements on psycopg's async pool; anything unusual on the SQLAlchemy engine."""

    def __init__(self, store: Store, max_connections: int = 10) -> None:
        self.store = store
        self.pool = AsyncConnectionPool(
            libpq_conninfo(store.url),
            min_size=1,
            max_size=max_connections,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
        )
        self._fallback = ThreadExecutor(store, threads=4)
        self._opened = False

    async def _ensure_open(self) -> None:
        if not self._opened:
            await self.pool.open(wait=False)
            self._opened = True

    async def _fetch(self, key: tuple[Any, ...], params: dict[str, Any]) -> list[dict[str, Any]]:
        await self._ensure_open()
        sql, defaults = _compiled(key)
        async with self.pool.connection() as conn:
            cursor = conn.cursor(binary=True)  # binary results: no text parsing of uuids and timestamps
            await cursor.execute(sql, {**defaults, **params})
            rows: list[dict[str, Any]] = await cursor.fetchall()  # type: ignore[assignment]  # dict_row
            return rows

    async def pop(
        self, target: PopTarget, *, limit: int, now: datetime, tree: FilterTree | None = None, caps: bool = False
    ) -> list[dict[str, Any]]:
        if tree is not None:
            return await self._fallback.pop(target, limit=limit, now=now, tree=tree, caps=caps)
        key = ("pop", target.queue is not None, target.fair, caps)
        rows = await self._fetch(key, {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now})
        return queues.sort_popped(rows, target)

    async def push(self, request: PushRequest, now: datetime) -> PushResult:
        params = request.params(now, data=orjson.dumps(request.data).decode())
        try:
            rows = await self._fetch(("push", request.on_duplicate), params)
        except psycopg.errors.UniqueViolation as exc:
            raise ConflictError(f"task '{request.task_id}' already exists") from exc
        return queues.push_result(rows[0] if rows else None, request)

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]:
        try:
            rows = await self._fetch(("change_status", requested.value), {"id_": task_id, "now_": now})
        except psycopg.errors.UniqueViolation as exc:
            raise queues.twin_queued(task_id) from exc
        if rows:
            return rows[0]
        return await self._fallback.change_status(task_id, requested, now)  # says why: 404 or 409

    async def queue_exists(self, queue_id: str) -> bool:
        return bool(await self._fetch(("queue_exists",), {"queue_": queue_id}))

    async def any_caps(self) -> bool:
        rows = await self._fetch(("any_caps",), {})
        return bool(rows and next(iter(rows[0].values())))

    async def close(self) -> None:
        if self._opened:
            await self.pool.close()
        await self._fallback.close()


def executor_for(store: Store) -> QueueExecutor:
    return PostgresExecutor(store) if store.is_postgresql else ThreadExecutor(store)
