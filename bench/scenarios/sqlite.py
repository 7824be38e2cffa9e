"""The embedded default: HTTP pops through `baton serve` on a SQLite file against the store-level pop
(`baton.storage.queues.operations.pop` on a SQLAlchemy connection, client threads in one process, the same
file), at 1 and 8 clients; and, as a reference, the same store-level pop behind the smallest ASGI
app there is (bench/minimal_asgi.py, same uvicorn): how far any Python HTTP server gets here.
SQLite serialises writers, so this is about the cost of the HTTP layer."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import insert

from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.runtime import prepare_store
from baton.storage.control.organisations import create_organisation
from baton.storage.queues.statements import TASKS
from bench.loadgen import Request
from bench.scenarios.common import (
    ORG,
    QUEUE,
    Context,
    clients,
    http_pop,
    interleaved,
    minimal_app,
    ratios_by_clients,
    rows_against,
    serve,
)

CLIENTS = (1, 8)
MINIMAL = "minimal ASGI app (reference)"


def fill(url: str, tasks: int) -> None:
    store = prepare_store(Settings(database_url=url))
    with store.session() as session:
        create_organisation(session, ORG, "Bench", maxsize=0)
    created = utcnow()
    rows = [
        {
            "id": uuid.uuid4(),
            "scheduler_id": QUEUE,
            "organisation": ORG,
            "type": "boefje",
            "priority": n % 100,
            "status": "queued",
            "data": {"boefje": {"id": "dns-records"}, "input_ooi": f"Hostname|internet|host-{n}.example.com"},
            "fair_key": 0,
            "attempts": 0,
            "created_at": created,
            "modified_at": created,
        }
        for n in range(tasks)
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(TASKS), rows)
    store.dispose()


def run(ctx: Context) -> dict[str, Any]:
    path = ctx.work_dir / "sqlite" / "baton.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{path}"
    queued = ctx.size(300_000, 40_000)  # three series at up to ~3,000 pops/s must not run it dry
    fill(url, queued)
    store_pop = Request(kind="store", target=url, counting="rows", params={"queue": QUEUE})
    with serve(url, log_dir=ctx.work_dir) as server, minimal_app(url, ctx.work_dir) as minimal:
        series = {}
        for count in CLIENTS:
            # processes=1: the store-level clients are threads of one process, as in the server.
            series[f"store-level pop|{count}"] = clients(store_pop, count, ctx.duration, processes=1)
            series[f"HTTP pop|{count}"] = clients(http_pop(server.url), count, ctx.duration)
            series[f"{MINIMAL}|{count}"] = clients(http_pop(minimal), count, ctx.duration)
        measured = interleaved(series, ctx.rounds)
    return {
        "queued_at_start": queued,
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows_against(measured, "store-level pop"),
        "ratios": ratios_by_clients(measured, "sqlite", "HTTP pop", "store-level pop", CLIENTS)
        | ratios_by_clients(measured, "minimal", MINIMAL, "store-level pop", CLIENTS)
        | ratios_by_clients(measured, "baton_to_minimal", "HTTP pop", MINIMAL, CLIENTS),
    }
