"""Fair pop cost against the number of backlogged organisations: the same number of queued tasks
spread over 10 or over 1,000 organisations (interleaved fair tags, one priority), popped by type
(`POST /schedulers/boefje/pop`, fairness on) through `baton serve`: latency with one client, throughput
with 8 (series interleaved, rounds); Baton's fair pop statement by type straight to PostgreSQL beside it."""

from __future__ import annotations

from typing import Any

from bench.scenarios.common import (
    Context,
    add_organisations,
    clients,
    connect,
    fill,
    fresh_database,
    http_pop_many,
    interleaved,
    ratio,
    serve,
    sql_pop,
)

COUNTS = (10, 1_000)
PRIORITY = 2


def run(ctx: Context) -> dict[str, Any]:
    total = ctx.size(200_000, 40_000)
    duration = ctx.duration
    rows = []
    for count in COUNTS:
        organisations = [f"org-{n:04d}" for n in range(count)]
        fresh_database(ctx)
        with connect(ctx) as conn:
            add_organisations(conn, organisations)
            fill(conn, organisations, total // count, priority=str(PRIORITY))
        with serve(ctx.database_url, {"BATON_FAIRNESS": "true"}, log_dir=ctx.work_dir) as server:
            measured = interleaved(
                {
                    "http_1": clients(http_pop_many(server.url, "boefje"), 1, duration),
                    "http_8": clients(http_pop_many(server.url, "boefje"), 8, duration),
                    "sql_1": clients(sql_pop(ctx, queue=None, fair=True), 1, duration),
                    "sql_8": clients(sql_pop(ctx, queue=None, fair=True), 8, duration),
                },
                ctx.rounds,
            )
        one, eight, raw, raw_eight = (measured[key] for key in ("http_1", "http_8", "sql_1", "sql_8"))
        rows.append(
            {
                "organisations": count,
                "queued": total // count * count,
                "pop_p50_ms": one["p50_ms"],
                "pop_p99_ms": one["p99_ms"],
                "pops_per_second_8_clients": eight["per_second"],
                "pops_8_clients_runs": eight["runs"],
                "sql_pop_p50_ms": raw["p50_ms"],
                "sql_pop_p99_ms": raw["p99_ms"],
                "sql_pops_per_second_8_clients": raw_eight["per_second"],
                "sql_pops_8_clients_runs": raw_eight["runs"],
                "ran_dry": any(series["ran_dry"] for series in measured.values()),
            }
        )
    few, many = rows[0], rows[-1]
    return {
        "duration_s": duration,
        "rows": rows,
        "ratios": {
            "pop_p99_many_to_few": ratio(many["pop_p99_ms"], few["pop_p99_ms"]),
            "sql_pop_p99_many_to_few": ratio(many["sql_pop_p99_ms"], few["sql_pop_p99_ms"]),
            "throughput_many_to_few": ratio(many["pops_per_second_8_clients"], few["pops_per_second_8_clients"]),
            "sql_throughput_many_to_few": ratio(
                many["sql_pops_per_second_8_clients"], few["sql_pops_per_second_8_clients"]
            ),
        },
    }
