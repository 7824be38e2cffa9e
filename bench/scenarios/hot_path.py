"""The hot path: one queue, one task per request. Pops through `baton serve` (one process on uvicorn, the
same on granian (BATON_HTTP_SERVER=granian: one worker process under its supervisor), and BATON_WORKERS=2)
against Baton's own pop statement sent straight to PostgreSQL by as many psycopg clients in autocommit (the
raw-SQL limit), at 1 and 8 clients; and one process with BATON_GROUP_POPS=false (every pop its own
statement), to show what the group pop gains."""

from __future__ import annotations

from typing import Any

from bench.scenarios.common import (
    Context,
    bench_queue,
    clients,
    http_pop,
    interleaved,
    minimal_server,
    pop_app_env,
    ratios_by_clients,
    rows_against,
    serve,
    sql_pop,
    with_server_cpu,
)

CLIENTS = (1, 8)
MINIMAL = "minimal ASGI app, same pop"
UVICORN = "HTTP, 1 process"
GRANIAN = "HTTP, granian"


def run(ctx: Context) -> dict[str, Any]:
    queued = ctx.size(300_000, 60_000)
    bench_queue(ctx, queued)
    with (
        minimal_server(ctx.database_url, ctx.work_dir, "pop_app", pop_app_env(max(CLIENTS))) as minimal,
        serve(ctx.database_url, log_dir=ctx.work_dir) as one,
        serve(ctx.database_url, {"BATON_HTTP_SERVER": "granian"}, log_dir=ctx.work_dir) as granian,
        serve(ctx.database_url, {"BATON_WORKERS": "2"}, log_dir=ctx.work_dir) as two,
        serve(ctx.database_url, {"BATON_GROUP_POPS": "false"}, log_dir=ctx.work_dir) as ungrouped,
    ):
        series = {}
        for count in CLIENTS:
            series[f"raw SQL|{count}"] = clients(sql_pop(ctx), count, ctx.duration)
            series[f"{UVICORN}|{count}"] = with_server_cpu(
                clients(http_pop(one.url), count, ctx.duration), one.process.pid
            )
            # The server's CPU: its worker's and its supervisor's (the process tree of `baton serve`).
            series[f"{GRANIAN}|{count}"] = with_server_cpu(
                clients(http_pop(granian.url), count, ctx.duration), granian.process.pid
            )
            series[f"{MINIMAL}|{count}"] = with_server_cpu(
                clients(http_pop(minimal.url), count, ctx.duration), minimal.process.pid
            )
            series[f"HTTP, BATON_WORKERS=2|{count}"] = clients(http_pop(two.url), count, ctx.duration)
            series[f"HTTP, BATON_GROUP_POPS=false|{count}"] = clients(http_pop(ungrouped.url), count, ctx.duration)
        measured = interleaved(series, ctx.rounds)
    return {
        "queued_at_start": queued,
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows_against(measured, "raw SQL"),
        "ratios": ratios_by_clients(measured, "http", UVICORN, "raw SQL", CLIENTS)
        | ratios_by_clients(measured, "granian", GRANIAN, "raw SQL", CLIENTS)
        | ratios_by_clients(measured, "granian_to_uvicorn", GRANIAN, UVICORN, CLIENTS)
        | ratios_by_clients(measured, "minimal", MINIMAL, "raw SQL", CLIENTS)
        | ratios_by_clients(measured, "baton_to_minimal", UVICORN, MINIMAL, CLIENTS)
        | ratios_by_clients(measured, "workers2", "HTTP, BATON_WORKERS=2", "raw SQL", CLIENTS)
        | ratios_by_clients(measured, "ungrouped", "HTTP, BATON_GROUP_POPS=false", "raw SQL", CLIENTS),
        "server_cpu_ms_per_pop": {
            name: summary["server_cpu_ms_per_op"]
            for name, summary in measured.items()
            if "server_cpu_ms_per_op" in summary
        },
    }
