"""Retention beside pops: pop throughput on PostgreSQL while the retention of finished tasks works
off a large backlog (BATON_TASK_RETENTION_DAYS), against pop throughput without it, in the same run,
interleaved round by round (A/B).

The backlog: millions of completed, failed and cancelled tasks last changed 60 days ago, beside the
queue the clients pop from. The remover is Baton's own `Housekeeper` (control/housekeeping.py, as a
`baton worker` runs it; the leading director runs the same rounds): batches of 1,000 oldest-first,
paced, a second per round. It runs through each "with retention" series and is stopped before the
next "without" one; how many tasks it removed per second while it ran is recorded, and whether the
backlog lasted to the end (a removal that ran out of work would measure nothing).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from baton.control.housekeeping import Housekeeper, HousekeepingReport
from baton.core.logging import configure_logging
from baton.core.settings import Settings
from baton.storage.engine import Store
from bench.loadgen import Rate
from bench.scenarios.common import (
    ORG,
    QUEUE,
    TASK_DATA_SQL,
    Context,
    bench_queue,
    clients,
    connect,
    http_pop,
    ratio,
    serve,
    sql_pop,
    summarise,
)

CLIENTS = 8
RETENTION_DAYS = 30
FINISHED_AGE = "60 days"
# Completed tasks dominate a real table; failures and cancellations are rarer.
STATUSES = "(ARRAY['completed', 'completed', 'completed', 'completed', 'failed', 'cancelled'])"


def fill_finished(ctx: Context, count: int) -> float:
    """`count` finished tasks of the bench organisation's queues, changed `FINISHED_AGE` ago (a
    millisecond apart, oldest first); seconds it took."""
    started = time.perf_counter()
    with connect(ctx) as conn:
        conn.execute(
            "INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, hash, data, attempts,"
            " created_at, modified_at, fair_key)"
            f" SELECT gen_random_uuid(), %(queue)s, %(org)s, 'boefje', 1, {STATUSES}[1 + n %% 6], md5(n::text),"
            f" {TASK_DATA_SQL}, 0, now() - interval '{FINISHED_AGE}' + n * interval '1 ms',"
            f" now() - interval '{FINISHED_AGE}' + n * interval '1 ms', 0"
            " FROM generate_series(1, %(count)s) AS n",
            {"queue": QUEUE, "org": ORG, "count": count},
        )
        conn.execute("VACUUM ANALYZE tasks")
    return time.perf_counter() - started


def finished_left(ctx: Context) -> int:
    with connect(ctx) as conn:
        row = conn.execute("SELECT count(*) FROM tasks WHERE status IN ('completed', 'failed', 'cancelled')").fetchone()
    return int(row[0]) if row else 0


class CountingHousekeeper(Housekeeper):
    """Baton's housekeeper, counting what it removed."""

    def __init__(self, store: Store, settings: Settings) -> None:
        super().__init__(store, settings, holder="bench-housekeeper")
        self.removed = 0
        self.rounds = 0

    def step(self) -> HousekeepingReport | None:
        report = super().step()
        if report is not None:
            self.removed += report.removed
            self.rounds += 1
        return report


def with_retention(
    store: Store, settings: Settings, measurement: Callable[[], Rate], runs: list[dict[str, Any]]
) -> Rate:
    """Run `measurement` while a housekeeper removes expired tasks; record its removal rate."""
    housekeeper = CountingHousekeeper(store, settings)
    started = time.perf_counter()
    housekeeper.start_in_background()
    while housekeeper.removed == 0 and time.perf_counter() - started < 30:
        time.sleep(0.05)  # removing already when the clients start
    try:
        rate = measurement()
    finally:
        housekeeper.stop()
    seconds = time.perf_counter() - started
    runs.append(
        {"removed": housekeeper.removed, "seconds": seconds, "removed_per_second": housekeeper.removed / seconds}
    )
    return rate


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    finished = ctx.size(2_000_000, 100_000)
    queued = ctx.size(1_000_000, 100_000)
    rounds = ctx.size(5, 1)
    bench_queue(ctx, queued)
    fill_seconds = fill_finished(ctx, finished)
    settings = Settings(database_url=ctx.database_url, task_retention_days=RETENTION_DAYS)
    store = Store(ctx.database_url)
    removal_runs: dict[str, list[dict[str, Any]]] = {"http": [], "sql": []}
    rates: dict[str, list[Rate]] = {name: [] for name in ("http", "http_retention", "sql", "sql_retention")}
    try:
        with serve(ctx.database_url, log_dir=ctx.work_dir) as server:
            series = {"http": clients(http_pop(server.url), CLIENTS, ctx.duration)}
            series["sql"] = clients(sql_pop(ctx), CLIENTS, ctx.duration)
            for _ in range(rounds):
                for name, measurement in series.items():
                    rates[name].append(measurement())
                    rates[f"{name}_retention"].append(with_retention(store, settings, measurement, removal_runs[name]))
    finally:
        store.dispose()
    left = finished_left(ctx)
    measured = {name: summarise(runs) for name, runs in rates.items()}
    removal = [run for runs in removal_runs.values() for run in runs]
    return {
        "clients": CLIENTS,
        "duration_s": ctx.duration,
        "rounds": rounds,
        "queued_at_start": queued,
        "finished_at_start": finished,
        "fill_s": fill_seconds,
        "finished_left": left,
        # The removal never ran out of work: every "with retention" series had tasks to remove.
        "backlog_lasted": left > 0,
        "removal": {
            "runs": removal_runs,
            "removed": sum(run["removed"] for run in removal),
            "removed_per_second_median": statistics.median(run["removed_per_second"] for run in removal),
        },
        "series": measured,
        "ratios": {
            "http_8": ratio(measured["http_retention"]["per_second"], measured["http"]["per_second"]),
            "sql_8": ratio(measured["sql_retention"]["per_second"], measured["sql"]["per_second"]),
        },
    }
