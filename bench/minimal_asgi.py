"""A reference, not a product: the least an ASGI app can do to hand out a task over HTTP.

Every request runs the store-level pop (the SQLite baseline's own call: `queues.pop` on a SQLAlchemy
connection, one transaction) on the event loop's thread and answers the row as JSON, under the same
uvicorn (httptools, uvloop) as `baton serve`. No routing, authentication, request ids, metrics,
logging, validation or error handling. What it reaches against the store-level pop is about as far as
any Python HTTP server on this machine can go; what Baton reaches against it is what Baton's own
request handling costs.

Run: BATON_DATABASE_URL=sqlite:///... BENCH_QUEUE=... uvicorn bench.minimal_asgi:app
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from baton.core.model import utcnow
from baton.core.queueing import PopTarget
from baton.storage import queues
from baton.storage.engine import Store

STORE = Store(os.environ["BATON_DATABASE_URL"])
TARGET = PopTarget(queue=os.environ["BENCH_QUEUE"])
HEADERS = [(b"content-type", b"application/json")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/ready":
        body = b"true"
    else:
        with STORE.engine.begin() as conn:
            rows = queues.pop(conn, TARGET, limit=1, now=utcnow(), raw_data=True)
        body = orjson.dumps(rows[0] if rows else None, default=str)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})
