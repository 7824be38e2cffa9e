"""Pushes through `baton serve` against a raw INSERT of the same rows by as many psycopg clients, in both
dialects: Baton's (`POST /queues/{id}/push`, a distinct hash per task so none is deduplicated, an
unbounded queue) and OpenKAT's as its web UI and runners send them (`POST /schedulers/{type}/push`,
mula's body: a boefje job, whose task is written with its rescan schedule and run, and a normalizer
job). Baton's push and OpenKAT's boefje push also through a `baton serve` on granian
(BATON_HTTP_SERVER=granian), beside the same on uvicorn. Each HTTP series reads the server's CPU per push.
As a reference, the same INSERT behind the smallest ASGI app there is (bench/minimal_asgi.py's `push_app`,
same uvicorn, the same request body): how far any Python HTTP server gets here; and the same app running
Baton's own push statement instead (`statement_push_app`; `statement_boefje_push_app` for mula's boefje
body: the task with its schedule and run): what Baton's statement costs beyond a plain INSERT, and what
Baton's request handling costs beyond that app. Every series also reads PostgreSQL's CPU per push."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.loadgen import Rate, Request
from bench.scenarios.common import (
    ORG,
    QUEUE,
    TASK_DATA_JSON,
    Context,
    bench_queue,
    clients,
    connect,
    interleaved,
    minimal_server,
    postmaster_of,
    ratios_by_clients,
    rows_against,
    serve,
    with_database_cpu,
    with_server_cpu,
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
# What OpenKAT's boefje push writes, as plain SQL in one statement: the task, its schedule (linked) and
# the boefje's run on its object.
SCHEDULED_INSERT_SQL = (
    "WITH made AS (SELECT md5(random()::text || clock_timestamp()::text) AS h),"
    " schedule AS (INSERT INTO schedules (id, scheduler_id, organisation, hash, data, enabled, schedule,"
    " deadline_at, last_run_at, created_at, modified_at) SELECT gen_random_uuid(), 'boefje', %(org)s, made.h,"
    " %(data)s::jsonb, true, NULL, now() + interval '1 day', now(), now(), now() FROM made RETURNING id, hash),"
    " run AS (INSERT INTO boefje_runs (organisation, boefje_id, object_key, queued_at)"
    " SELECT %(org)s, 'dns-records', made.h, now() FROM made)"
    " INSERT INTO tasks (id, scheduler_id, schedule_id, organisation, type, priority, status, hash, data, fair_key,"
    " attempts, created_at, modified_at) SELECT gen_random_uuid(), %(queue)s, schedule.id::text, %(org)s, 'boefje',"
    " %(priority)s, 'queued', schedule.hash, %(data)s::jsonb, 0, 0, now(), now() FROM schedule"
)


# The minimal app's: the request's own hash, and the new id answered.
MINIMAL_INSERT_SQL = INSERT_SQL.replace("md5(random()::text || clock_timestamp()::text)", "%(hash)s") + " RETURNING id"
MINIMAL = "minimal ASGI app, same INSERT"
# The same app running Baton's own push statement (the queue's checks, deduplication, the fair tag; for mula's
# boefje body, the schedule and run too): what a push costs any Python HTTP server with Baton's statement.
STATEMENT_APP = "minimal ASGI app, Baton's push statement"
STATEMENT_BOEFJE_APP = "minimal ASGI app, Baton's boefje push statement"
OPENKAT_BOEFJE = "OpenKAT boefje push"
OPENKAT_NORMALIZER = "OpenKAT normalizer push"
GRANIAN = ", granian"  # the series' name on granian: `HTTP push, granian`, `OpenKAT boefje push, granian`
# mula's body as rocky sends a manual boefje run (TaskPush): the task's id is the job's id.
BOEFJE_BODY = (
    f'{{"id": "{{uuid}}", "scheduler_id": "boefje", "organisation": "{ORG}", "priority": 1, "data": {{"id": "{{uuid}}",'
    f' "boefje": {{"id": "dns-records", "name": "DNS records", "version": null}},'
    f' "input_ooi": "Hostname|internet|{{client}}-{{n}}.example.com", "organization": "{ORG}"}}}}'
)
# A normalizer task as OpenKAT's runners push one back (a raw file of a boefje run to parse).
NORMALIZER_BODY = (
    f'{{"id": "{{uuid}}", "scheduler_id": "normalizer", "organisation": "{ORG}", "priority": 5, "data": {{'
    f'"id": "{{uuid}}", "normalizer": {{"id": "kat_dns_normalize", "version": null}}, "raw_data": {{"id": "{{uuid}}",'
    f' "boefje_meta": {{"id": "{{uuid}}", "boefje": {{"id": "dns-records", "version": null}},'
    f' "input_ooi": "Hostname|internet|{{client}}-{{n}}.example.com", "arguments": {{}}, "organization": "{ORG}",'
    f' "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z"}},'
    f' "mime_types": [{{"value": "boefje/dns-records"}}, {{"value": "openkat/dns"}}]}}}}}}'
)


def raw_insert(ctx: Context, sql: str = INSERT_SQL) -> Request:
    params = {"queue": QUEUE, "org": ORG, "priority": PRIORITY, "data": TASK_DATA_JSON}
    return Request(kind="sql", target=ctx.libpq, counting="rows", sql=sql, params=params)


def http_push(url: str) -> Request:
    body = f'{{"priority": {PRIORITY}, "hash": "{{client}}-{{n}}", "data": {TASK_DATA_JSON}}}'
    return Request(
        kind="http", target=url, counting="created", path=f"/queues/{QUEUE}/push", body=body.encode(), templated=True
    )


def openkat_push(url: str, kind: str, body: str) -> Request:
    return Request(
        kind="http", target=url, counting="created", path=f"/schedulers/{kind}/push", body=body.encode(), templated=True
    )


def run(ctx: Context) -> dict[str, Any]:
    bench_queue(ctx, 0)
    minimal_env = {"BENCH_INSERT_SQL": MINIMAL_INSERT_SQL}
    with connect(ctx) as conn:
        postmaster = postmaster_of(conn)
    with (
        serve(ctx.database_url, log_dir=ctx.work_dir) as server,
        serve(ctx.database_url, {"BATON_HTTP_SERVER": "granian"}, log_dir=ctx.work_dir) as granian,
        minimal_server(ctx.database_url, ctx.work_dir, "push_app", minimal_env) as minimal,
        minimal_server(ctx.database_url, ctx.work_dir, "statement_push_app") as statement_app,
        minimal_server(ctx.database_url, ctx.work_dir, "statement_boefje_push_app") as statement_boefje_app,
    ):
        pid = server.process.pid
        series: dict[str, Callable[[], Rate]] = {}
        for count in CLIENTS:
            series[f"raw INSERT|{count}"] = clients(raw_insert(ctx), count, ctx.duration)
            series[f"raw INSERT with schedule|{count}"] = clients(
                raw_insert(ctx, SCHEDULED_INSERT_SQL), count, ctx.duration
            )
            series[f"HTTP push|{count}"] = with_server_cpu(clients(http_push(server.url), count, ctx.duration), pid)
            boefje = openkat_push(server.url, "boefje", BOEFJE_BODY)
            series[f"{OPENKAT_BOEFJE}|{count}"] = with_server_cpu(clients(boefje, count, ctx.duration), pid)
            normalizer = openkat_push(server.url, "normalizer", NORMALIZER_BODY)
            series[f"{OPENKAT_NORMALIZER}|{count}"] = with_server_cpu(clients(normalizer, count, ctx.duration), pid)
            # The server's CPU: its worker's and its supervisor's (the process tree of `baton serve`).
            on_granian = granian.process.pid
            series[f"HTTP push{GRANIAN}|{count}"] = with_server_cpu(
                clients(http_push(granian.url), count, ctx.duration), on_granian
            )
            boefje_on_granian = openkat_push(granian.url, "boefje", BOEFJE_BODY)
            series[f"{OPENKAT_BOEFJE}{GRANIAN}|{count}"] = with_server_cpu(
                clients(boefje_on_granian, count, ctx.duration), on_granian
            )
            series[f"{MINIMAL}|{count}"] = with_server_cpu(
                clients(http_push(minimal.url), count, ctx.duration), minimal.process.pid
            )
            series[f"{STATEMENT_APP}|{count}"] = with_server_cpu(
                clients(http_push(statement_app.url), count, ctx.duration), statement_app.process.pid
            )
            series[f"{STATEMENT_BOEFJE_APP}|{count}"] = with_server_cpu(
                clients(openkat_push(statement_boefje_app.url, "boefje", BOEFJE_BODY), count, ctx.duration),
                statement_boefje_app.process.pid,
            )
        measured = interleaved({name: with_database_cpu(run, postmaster) for name, run in series.items()}, ctx.rounds)
    return {
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows_against(measured, "raw INSERT"),
        "ratios": ratios_by_clients(measured, "push", "HTTP push", "raw INSERT", CLIENTS)
        | ratios_by_clients(measured, "minimal", MINIMAL, "raw INSERT", CLIENTS)
        | ratios_by_clients(measured, "baton_to_minimal", "HTTP push", MINIMAL, CLIENTS)
        | ratios_by_clients(measured, "statement_app_to_minimal", STATEMENT_APP, MINIMAL, CLIENTS)
        | ratios_by_clients(measured, "baton_to_statement_app", "HTTP push", STATEMENT_APP, CLIENTS)
        | ratios_by_clients(measured, "statement_boefje_app", STATEMENT_BOEFJE_APP, "raw INSERT with schedule", CLIENTS)
        | ratios_by_clients(measured, "openkat_boefje_to_statement_app", OPENKAT_BOEFJE, STATEMENT_BOEFJE_APP, CLIENTS)
        | ratios_by_clients(measured, "openkat_boefje", OPENKAT_BOEFJE, "raw INSERT with schedule", CLIENTS)
        | ratios_by_clients(measured, "openkat_normalizer", OPENKAT_NORMALIZER, "raw INSERT", CLIENTS)
        | ratios_by_clients(measured, "granian", f"HTTP push{GRANIAN}", "raw INSERT", CLIENTS)
        | ratios_by_clients(measured, "granian_to_uvicorn", f"HTTP push{GRANIAN}", "HTTP push", CLIENTS)
        | ratios_by_clients(
            measured, "openkat_boefje_granian", f"{OPENKAT_BOEFJE}{GRANIAN}", "raw INSERT with schedule", CLIENTS
        )
        | ratios_by_clients(
            measured, "openkat_boefje_granian_to_uvicorn", f"{OPENKAT_BOEFJE}{GRANIAN}", OPENKAT_BOEFJE, CLIENTS
        ),
        "server_cpu_ms_per_push": {
            name: summary["server_cpu_ms_per_op"]
            for name, summary in measured.items()
            if "server_cpu_ms_per_op" in summary
        },
        "database_cpu_ms_per_push": {
            name: summary["database_cpu_ms_per_op"]
            for name, summary in measured.items()
            if "database_cpu_ms_per_op" in summary
        },
    }
