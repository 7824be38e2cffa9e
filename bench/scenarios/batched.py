"""Batched pops: `POST /schedulers/{queue}/pop?limit=10` against one-task pops (`POST /queues/{queue}/pop`),
in tasks per second, through one `baton serve` process."""

from __future__ import annotations

from typing import Any

from bench.scenarios.common import (
    QUEUE,
    Context,
    bench_queue,
    clients,
    http_pop,
    http_pop_many,
    interleaved,
    ratios_by_clients,
    rows_against,
    serve,
)

CLIENTS = (1, 8)
BATCH = 10


def run(ctx: Context) -> dict[str, Any]:
    queued = ctx.size(300_000, 60_000)
    bench_queue(ctx, queued)
    with serve(ctx.database_url, log_dir=ctx.work_dir) as server:
        series = {}
        for count in CLIENTS:
            series[f"one task per request|{count}"] = clients(http_pop(server.url), count, ctx.duration)
            series[f"{BATCH} tasks per request|{count}"] = clients(
                http_pop_many(server.url, QUEUE, BATCH), count, ctx.duration
            )
        measured = interleaved(series, ctx.rounds)
    return {
        "queued_at_start": queued,
        "batch": BATCH,
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows_against(measured, "one task per request"),
        "ratios": ratios_by_clients(measured, "batched", f"{BATCH} tasks per request", "one task per request", CLIENTS),
    }
