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
    ratio,
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
    rows = []
    for key, summary in measured.items():
        name, count = key.split("|")
        baseline = measured[f"one task per request|{count}"]["per_second"]
        rows.append({"series": name, "clients": int(count), **summary, "ratio": ratio(summary["per_second"], baseline)})
    return {
        "queued_at_start": queued,
        "batch": BATCH,
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows,
        "ratios": {
            f"batched_{count}": ratio(
                measured[f"{BATCH} tasks per request|{count}"]["per_second"],
                measured[f"one task per request|{count}"]["per_second"],
            )
            for count in CLIENTS
        },
    }
