"""A reference, not a product: the least an ASGI app can do to hand out a task over HTTP.

Every request runs the store-level pop (the SQLite baseline's own call: `queues.pop` on a SQLAlchemy
connection, one transaction) on the event loop's thread and answers the row as JSON, under the same
uvicorn (httptools, uvloop) as `baton serve`. No routing, authentication, request ids, metrics,
logging, validation or error handling. What it reaches against the store-level pop is about as far as
any Python HTTP server on this machine can go; what Baton reaches against it is what Baton's own
request handling costs.

Run: BATON_DATABASE_URL=sqlite:///... BENCH_QUEUE=... uvicorn bench.minimal_asgi:app

`pop_app` is the same on PostgreSQL with Baton's own pop statement (BENCH_POP_SQL, the raw-SQL baseline's,
with its parameters in BENCH_POP_PARAMS) on an async psycopg connection in autocommit, one per client:
the hot path's reference for what a pop costs any Python HTTP server.

`push_app` is the same for a push: it parses the JSON body and runs the push scenario's raw INSERT
with the body's hash, priority and data (BENCH_INSERT_SQL) on an async psycopg connection in
autocommit, one of as many as there are clients (concurrent pushes overlap on the database), and
answers 201 with the new row's id; again nothing else (no admission, deduplication, schedule or
validation).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from psycopg_pool import AsyncConnectionPool

from baton.core.jobs import BoefjeJob, job_hash, job_of
from baton.core.model import SchedulerType, scheduler_id_for, utcnow
from baton.core.queueing import PopTarget, PushRequest
from baton.core.rescans import pushed_schedule
from baton.core.settings import Settings
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.queues.door import PushStatement
from baton.storage.queues.links import compiled
from baton.storage.queues.push import push_params
from baton.storage.urls import libpq_conninfo

STORE = Store(os.environ["BATON_DATABASE_URL"])
TARGET = PopTarget(queue=os.environ["BENCH_QUEUE"])
SETTINGS = Settings()
HEADERS = [(b"content-type", b"application/json")]


async def lifespan(receive: Any, send: Any) -> None:
    while (await receive())["type"] == "lifespan.startup":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def body_of(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


Handler = Callable[[bytes], Awaitable[tuple[int, bytes]]]


def serving(handle: Handler) -> Callable[[dict[str, Any], Any, Any], Awaitable[None]]:
    """The ASGI app around `handle` (a request's body in, its status and JSON out): the lifespan, the
    body read whole, `/ready`, the answer; nothing else."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        body = await body_of(receive)
        status, answer = (200, b"true") if scope["path"] == "/ready" else await handle(body)
        await send({"type": "http.response.start", "status": status, "headers": HEADERS})
        await send({"type": "http.response.body", "body": answer})

    return asgi


async def store_pop(_body: bytes) -> tuple[int, bytes]:
    with STORE.engine.begin() as conn:
        rows = queues.pop(conn, TARGET, limit=1, now=utcnow(), raw_data=True)
    return 200, orjson.dumps(rows[0] if rows else None, default=str)


async def insert(body: bytes) -> tuple[int, bytes]:
    task = orjson.loads(body)
    params = {
        "queue": TARGET.queue,
        "org": os.environ["BENCH_ORG"],
        "priority": task["priority"],
        "hash": task["hash"],
        "data": orjson.dumps(task["data"]).decode(),
    }
    async with (await push_pool()).connection() as conn:
        row = await (await conn.execute(INSERT_SQL, params)).fetchone()
    return 201, orjson.dumps({"id": row[0] if row else None}, default=str)


async def statement_pop(_body: bytes) -> tuple[int, bytes]:
    async with (await push_pool()).connection() as conn:
        return 200, await row_answer(await conn.execute(POP_SQL, {**POP_PARAMS, "now_": utcnow()}))


async def row_answer(cursor: Any) -> bytes:
    """The statement's first row as a JSON object (null without one)."""
    row = await cursor.fetchone()
    names = [column.name for column in cursor.description or ()]
    return orjson.dumps(dict(zip(names, row, strict=True)) if row else None, default=str)


async def statement_push(body: bytes) -> tuple[int, bytes]:
    """Baton's own push statement (Baton's dialect: the queue's checks, deduplication, the fair tag)."""
    task = orjson.loads(body)
    request = PushRequest(TARGET.queue, task["priority"], task["data"], task["hash"], task_id=uuid.uuid4())
    return 201, await run_push(request)


async def statement_boefje_push(body: bytes) -> tuple[int, bytes]:
    """Baton's push statement with a boefje task's rescan schedule and run, from mula's body: the job read
    by Baton's own model, its hash and schedule as Baton makes them (no plugin timings: the grace period)."""
    pushed = orjson.loads(body)
    job = job_of(SchedulerType.BOEFJE, pushed["data"])
    now = utcnow()
    schedule = pushed_schedule(SETTINGS, job, pushed["data"], now, None, None) if isinstance(job, BoefjeJob) else None
    queue = scheduler_id_for(SchedulerType.BOEFJE, pushed["organisation"])
    request = PushRequest(
        queue,
        pushed["priority"],
        pushed["data"],
        job_hash(job),
        task_id=uuid.UUID(pushed["id"]),
        on_duplicate="refuse",
        schedule=schedule,
    )
    return 201, await run_push(request)


async def run_push(request: PushRequest) -> bytes:
    """Baton's push statement for `request`, sent as its queue door sends it (binary results)."""
    sql, defaults = compiled(PushStatement(request.on_duplicate, request.schedule is not None))
    params = {**defaults, **push_params(request, utcnow(), encode=lambda document: orjson.dumps(document).decode())}
    async with (await push_pool()).connection() as conn:
        return await row_answer(await conn.cursor(binary=True).execute(sql, params))


app = serving(store_pop)
push_app = serving(insert)
pop_app = serving(statement_pop)
statement_push_app = serving(statement_push)
statement_boefje_push_app = serving(statement_boefje_push)


POP_SQL = os.environ.get("BENCH_POP_SQL", "")
POP_PARAMS: dict[str, Any] = orjson.loads(os.environ.get("BENCH_POP_PARAMS", "{}"))  # read once, not per pop
INSERT_SQL = os.environ.get("BENCH_INSERT_SQL", "")
PUSH_CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "8"))
_pool: AsyncConnectionPool | None = None


async def push_pool() -> AsyncConnectionPool:
    """As many autocommit connections as clients (opened on first use), so that concurrent pushes
    overlap on the database as they do in a server with a thread pool, without one."""
    global _pool
    if _pool is None:
        pool = AsyncConnectionPool(
            libpq_conninfo(STORE.url), min_size=PUSH_CONNECTIONS, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True)
        _pool = pool
    return _pool
