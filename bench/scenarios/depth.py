"""Queue depth: pop latency (one client, one task per request) and `GET /queues` latency through
`baton serve` with 10k, 100k and 1M tasks queued, and the raw-SQL pop beside them. Both should stay
flat: the pop reads the head of a partial index, the queue sizes come from trigger-kept counters."""

from __future__ import annotations

from typing import Any

from bench.loadgen import Request
from bench.scenarios.common import Context, bench_queue, clients, http_pop, ratio, serve, sql_pop

# Tasks added above each nominal size, per pop series: one client pops well under this many per
# second, so the queue never holds fewer than its nominal size while it is measured.
HEADROOM_PER_SECOND = 4_000


def run(ctx: Context) -> dict[str, Any]:
    sizes = [10_000, 100_000, 1_000_000] if not ctx.quick else [10_000, 50_000, 200_000]
    duration = 3.0 if ctx.quick else 6.0
    rows = []
    headroom = int(2 * duration * HEADROOM_PER_SECOND)  # the HTTP and the SQL pop series
    for size in sizes:
        bench_queue(ctx, size + headroom)
        with serve(ctx.database_url, log_dir=ctx.work_dir) as server:
            queues = Request(kind="http", target=server.url, counting="ok", method="GET", path="/queues")
            pop = clients(http_pop(server.url), 1, duration)()
            listing = clients(queues, 1, duration)()
        raw = clients(sql_pop(ctx), 1, duration)()
        rows.append(
            {
                "queued": size,
                "pop_p50_ms": pop.p50_ms,
                "pop_p99_ms": pop.p99_ms,
                "pop_per_second": pop.per_second,
                "queues_p50_ms": listing.p50_ms,
                "queues_p99_ms": listing.p99_ms,
                "sql_pop_p50_ms": raw.p50_ms,
                "sql_pop_p99_ms": raw.p99_ms,
                "ran_dry": pop.ran_dry or raw.ran_dry,
            }
        )
    smallest, largest = rows[0], rows[-1]
    return {
        "duration_s": duration,
        "headroom": headroom,
        "rows": rows,
        "ratios": {
            "pop_p99_largest_to_smallest": ratio(largest["pop_p99_ms"], smallest["pop_p99_ms"]),
            "queues_p99_largest_to_smallest": ratio(largest["queues_p99_ms"], smallest["queues_p99_ms"]),
            "sql_pop_p99_largest_to_smallest": ratio(largest["sql_pop_p99_ms"], smallest["sql_pop_p99_ms"]),
        },
    }
