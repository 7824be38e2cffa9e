"""Pushes through `baton serve` (POST /queues/{id}/push, a distinct hash per task so none is
deduplicated, an unbounded queue) against a raw INSERT of the same row by as many psycopg clients;
and, as a reference, the same INSERT behind the smallest ASGI app there is (bench/minimal_asgi.py's
`push_app`, same uvicorn, the same request body): how far any Python HTTP server gets here."""

from __future__ import annotations

from typing import Any

from bench.loadgen import Request
from bench.scenarios.common import (
    ORG,
    QUEUE,
    TASK_DATA_JSON,
    Context,
    bench_queue,
    clients,
    interleaved,
    minimal_app,
    ratios_by_clients,
    rows_against,
    serve,
)

CLIENTS = (1, 8)
PRIORITY = 5
# One task row as a push writes it (the fair tag aside, which a push computes): the counter trigger,
# the partial indexes and the unique hash index all do their work here too.
INSERT_SQL = (
    "INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, hash, data, fair_key, attempts,"
    " created_at, modified_at) VALUES (gen_random_uuid(), %(queue)s, %(org)s, 'boefje', %(priority)s, 'queued',"
    " md5(random()::text || clock_timestamp()::text), %(data)s::jsonb, 0, 0, now(), now())"
)


# The minimal app's: the request's own hash, and the new id answered.
MINIMAL_INSERT_SQL = INSERT_SQL.replace("md5(random()::text || clock_timestamp()::text)", "%(hash)s") + " RETURNING id"
MINIMAL = "minimal ASGI app, same INSERT"


def raw_insert(ctx: Context) -> Request:
    params = {"queue": QUEUE, "org": ORG, "priority": PRIORITY, "data": TASK_DATA_JSON}
    return Request(kind="sql", target=ctx.libpq, counting="rows", sql=INSERT_SQL, params=params)


def http_push(url: str) -> Request:
    body = f'{{"priority": {PRIORITY}, "hash": "{{client}}-{{n}}", "data": {TASK_DATA_JSON}}}'
    return Request(
        kind="http", target=url, counting="created", path=f"/queues/{QUEUE}/push", body=body.encode(), templated=True
    )


def run(ctx: Context) -> dict[str, Any]:
    bench_queue(ctx, 0)
    minimal_env = {"BENCH_INSERT_SQL": MINIMAL_INSERT_SQL}
    with (
        serve(ctx.database_url, log_dir=ctx.work_dir) as server,
        minimal_app(ctx.database_url, ctx.work_dir, "push_app", minimal_env) as minimal,
    ):
        series = {}
        for count in CLIENTS:
            series[f"raw INSERT|{count}"] = clients(raw_insert(ctx), count, ctx.duration)
            series[f"HTTP push|{count}"] = clients(http_push(server.url), count, ctx.duration)
            series[f"{MINIMAL}|{count}"] = clients(http_push(minimal), count, ctx.duration)
        measured = interleaved(series, ctx.rounds)
    return {
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows_against(measured, "raw INSERT"),
        "ratios": ratios_by_clients(measured, "push", "HTTP push", "raw INSERT", CLIENTS)
        | ratios_by_clients(measured, "minimal", MINIMAL, "raw INSERT", CLIENTS)
        | ratios_by_clients(measured, "baton_to_minimal", "HTTP push", MINIMAL, CLIENTS),
    }
