"""Capacity: what each operation costs in CPU, for the capacity model of docs/scaling.md.

One `baton serve --no-director` on PostgreSQL, 8 clients per series for a fixed time: HTTP pop (one task),
HTTP pop limit=10, HTTP push (OpenKAT's boefje push: the task, its schedule and run), HTTP PATCH of a task's
status (dispatched -> completed, as OpenKAT's runners report the end of a task), HTTP GET of a task (OpenKAT's
runners read it back before the last PATCH), and the raw-SQL baselines of each (Baton's own pop and status
statements, the INSERT of a task with its schedule and run in one statement, a SELECT by id) via psycopg.
Around each series the CPU time of the API process tree, of the PostgreSQL server (the postmaster and all its
children: it must be PostgreSQL of its own, on this machine) and of the load generator is read from /proc
(`harness.cputime`), and the WAL written (`pg_current_wal_lsn()`): operations per CPU-second (per core at
100 % use) and WAL bytes per operation, which the machine's noise distorts far less than it distorts rates.

Then table growth: 100,000 boefje tasks with OpenKAT's task data (20 boefjes of the catalogue x 5,000
objects) taken through their lifecycle (queued, dispatched, running, completed), bytes per row of
`tasks` with its indexes and TOAST; and per row of `events` (consumed `scan_profile_mutation` events,
which nothing removes) and `boefje_runs` (one per organisation, boefje and object).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from baton.core.model import TaskStatus
from baton.storage.queues import statements
from bench import taskids
from bench.loadgen import Rate, Request, measure
from bench.scenarios.common import (
    ORG,
    QUEUE,
    TASK_DATA_SQL,
    Context,
    bench_queue,
    connect,
    fill,
    http_pop,
    http_pop_many,
    postmaster_of,
    serve,
    sql_pop,
    wal_position,
)
from bench.scenarios.push import BOEFJE_BODY, SCHEDULED_INSERT_SQL, openkat_push, raw_insert
from bench.scenarios.table_growth import growth
from harness.cputime import own_seconds, snapshot, tree_seconds

CLIENTS = 8
BATCH = 10
STATUS_BODY = b'{"status": "completed"}'


# Per-client tasks to PATCH: ids made of (batch, client, n) (bench.taskids), so every call names its own.
DISPATCHED_SQL = (
    "INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, hash, data, fair_key, attempts,"
    " created_at, modified_at)"
    " SELECT (lpad(to_hex(%(batch)s::bigint), 16, '0') || lpad(to_hex(c), 8, '0') || lpad(to_hex(n), 8, '0'))::uuid,"
    f" %(queue)s, %(org)s, 'boefje', 5, 'dispatched', md5(%(batch)s || '-' || c || '-' || n), {TASK_DATA_SQL},"
    " 0, 1, now(), now() FROM generate_series(0, %(clients)s - 1) AS c, generate_series(1, %(each)s) AS n"
)


# What `GET /tasks/{id}` reads: the task's row by its id (the unique index on `id`).
READ_SQL = "SELECT * FROM tasks WHERE id = %(id_)s"


def status_statement() -> tuple[str, dict[str, Any]]:
    """Baton's own status change to `completed`, as the API's PostgreSQL executor sends it."""
    compiled = statements.change_status(TaskStatus.COMPLETED, raw_data=True).compile(
        dialect=statements.dialect_of("postgresql")
    )
    return str(compiled), dict(compiled.params)


# -- the meters ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Meters:
    api: int
    postmaster: int

    def read(self, conn: Any) -> dict[str, float]:
        processes = snapshot()
        return {
            "at": time.monotonic(),
            "api": tree_seconds(self.api, processes),
            "postgresql": tree_seconds(self.postmaster, processes),
            "loadgen": own_seconds(),
            **wal_position(conn),
        }


def other_backends(conn: Any) -> int:
    """Client backends on other databases: work that would be counted as this benchmark's."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        " AND datname IS DISTINCT FROM current_database()"
    ).fetchone()
    return int(row[0])


# -- the series ------------------------------------------------------------------------------------------


@dataclass
class Series:
    name: str
    operation: str  # pop, pop limit=10, push, patch
    via: str  # http or sql
    requests: Callable[[int], list[Request]]  # given this measurement's batch number
    prepare: Callable[[Any, int, int], None]  # (connection, batch, how many tasks it may take)
    guess: int  # tasks (or calls) a measurement may take at first; later 2x the most it took


def series_of(ctx: Context, url: str) -> list[Series]:
    sql, defaults = status_statement()

    def top_up(conn: Any, _batch: int, need: int) -> None:
        row = conn.execute(
            "SELECT count(*) FROM tasks WHERE scheduler_id = %s AND status = 'queued'", (QUEUE,)
        ).fetchone()
        if int(row[0]) < need:
            fill(conn, [ORG], need - int(row[0]), vacuum=False)

    def dispatched(conn: Any, batch: int, need: int) -> None:
        each = need // CLIENTS + 1
        conn.execute(DISPATCHED_SQL, {"batch": batch, "queue": QUEUE, "org": ORG, "clients": CLIENTS, "each": each})

    def nothing(_conn: Any, _batch: int, _need: int) -> None:
        return None

    def http_reads(batch: int) -> list[Request]:
        return [
            Request(
                kind="http",
                target=url,
                counting="created",  # as for the PATCHes: a 404 stops the client, as dry
                method="GET",
                path_of=partial(taskids.task_path, batch, client),
            )
            for client in range(CLIENTS)
        ]

    def sql_reads(batch: int) -> list[Request]:
        return [
            Request(
                kind="sql",
                target=ctx.libpq,
                counting="rows",
                sql=READ_SQL,
                params={"id_": partial(taskids.task_id, batch, client)},
                templated=True,
            )
            for client in range(CLIENTS)
        ]

    def http_patches(batch: int) -> list[Request]:
        return [
            Request(
                kind="http",
                target=url,
                # 200 counts one; a 404 (this client's tasks all taken) counts none and stops it, as dry.
                counting="created",
                method="PATCH",
                body=STATUS_BODY,
                path_of=partial(taskids.task_path, batch, client),
            )
            for client in range(CLIENTS)
        ]

    def sql_patches(batch: int) -> list[Request]:
        return [
            Request(
                kind="sql",
                target=ctx.libpq,
                counting="rows",
                sql=sql,
                params={**defaults, "now_": partial(taskids.now), "id_": partial(taskids.task_id, batch, client)},
                templated=True,
            )
            for client in range(CLIENTS)
        ]

    seconds = duration(ctx)
    return [
        # Each fill a third or more above the fastest round seen on a quiet machine: a series that runs
        # dry counts calls that found nothing, and is marked invalid.
        Series("HTTP pop", "pop", "http", lambda _b: [http_pop(url)] * CLIENTS, top_up, int(4_500 * seconds)),
        Series("raw SQL pop", "pop", "sql", lambda _b: [sql_pop(ctx)] * CLIENTS, top_up, int(5_000 * seconds)),
        Series(
            f"HTTP pop limit={BATCH}",
            f"pop limit={BATCH}",
            "http",
            lambda _b: [http_pop_many(url, QUEUE, BATCH)] * CLIENTS,
            top_up,
            int(15_000 * seconds),
        ),
        Series(
            f"raw SQL pop limit={BATCH}",
            f"pop limit={BATCH}",
            "sql",
            lambda _b: [sql_pop(ctx, limit=BATCH)] * CLIENTS,
            top_up,
            int(15_000 * seconds),
        ),
        # OpenKAT's push, as its web UI sends a boefje task: the task with its rescan schedule and run.
        Series(
            "HTTP push (OpenKAT boefje)", "push", "http", lambda _b: [openkat_boefje_push(url)] * CLIENTS, nothing, 0
        ),
        Series(
            "raw INSERT with schedule",
            "push",
            "sql",
            lambda _b: [raw_insert(ctx, SCHEDULED_INSERT_SQL)] * CLIENTS,
            nothing,
            0,
        ),
        # The first round's guess (later rounds take twice the most a round moved): room for about twice the
        # rates seen on this machine, since a series that runs out of tasks is invalid.
        Series("HTTP PATCH", "patch", "http", http_patches, dispatched, int(6_000 * seconds)),
        Series("raw UPDATE", "patch", "sql", sql_patches, dispatched, int(12_000 * seconds)),
        Series("HTTP GET task", "read", "http", http_reads, dispatched, int(8_000 * seconds)),
        Series("raw SELECT by id", "read", "sql", sql_reads, dispatched, int(30_000 * seconds)),
    ]


def openkat_boefje_push(url: str) -> Request:
    return openkat_push(url, "boefje", BOEFJE_BODY)


def duration(ctx: Context) -> float:
    return 2.0 if ctx.quick else 10.0


def measured_once(
    ctx: Context, series: Series, meters: Meters, batch: int, need: int
) -> tuple[Rate, dict[str, float], int]:
    """Prepare and vacuum (outside the window), then one measurement between two readings of the meters:
    (rate, what each meter moved, calls made including each client's uncounted warm-up)."""
    with connect(ctx) as conn:
        series.prepare(conn, batch, need)
        # Statistics as autovacuum keeps them in production: without them, on a table just filled,
        # the planner scans where it should use an index, and that cost would be measured instead.
        conn.execute("VACUUM ANALYZE tasks")
        before = meters.read(conn)
        rate = measure(series.requests(batch), duration(ctx), processes=4)
        after = meters.read(conn)
    used = {key: after[key] - before[key] for key in before}
    return rate, used, rate.operations + CLIENTS


def summary(series: Series, runs: list[tuple[Rate, dict[str, float], int]]) -> dict[str, Any]:
    """Totals over the rounds: calls, tasks, CPU-seconds and WAL; per CPU-second of each side."""
    calls = sum(calls for _, _, calls in runs)
    warmup_tasks = CLIENTS * (BATCH if "limit" in series.operation else 1)
    tasks = sum(rate.moved for rate, _, _ in runs) + len(runs) * warmup_tasks
    cpu = {side: sum(used[side] for _, used, _ in runs) for side in ("api", "postgresql", "loadgen")}
    wall = sum(used["at"] for _, used, _ in runs)
    measured = sum(rate.seconds for rate, _, _ in runs)
    wal = sum(used["wal"] for _, used, _ in runs)
    checkpoints = sum(used["checkpoints"] for _, used, _ in runs)
    return {
        "series": series.name,
        "operation": series.operation,
        "via": series.via,
        "rounds": len(runs),
        "calls": calls,
        "tasks": tasks,
        "per_second": sorted(rate.per_second for rate, _, _ in runs)[len(runs) // 2],
        "runs": [round(rate.per_second, 1) for rate, _, _ in runs],
        "p50_ms": sorted(rate.p50_ms for rate, _, _ in runs)[len(runs) // 2],
        "p99_ms": sorted(rate.p99_ms for rate, _, _ in runs)[len(runs) // 2],
        "ran_dry": any(rate.ran_dry for rate, _, _ in runs),
        "window_s": wall,
        "cpu_s": cpu,
        "wal_bytes": wal,
        "checkpoints": checkpoints,
        "calls_per_api_cpu_s": calls / cpu["api"] if series.via == "http" and cpu["api"] else None,
        "calls_per_postgresql_cpu_s": calls / cpu["postgresql"] if cpu["postgresql"] else None,
        "tasks_per_api_cpu_s": tasks / cpu["api"] if series.via == "http" and cpu["api"] else None,
        "tasks_per_postgresql_cpu_s": tasks / cpu["postgresql"] if cpu["postgresql"] else None,
        "calls_per_loadgen_cpu_s": calls / cpu["loadgen"] if cpu["loadgen"] else None,
        "wal_bytes_per_task": wal / tasks if tasks else None,
        # Each round's own tasks per CPU-second (warm-up calls left out), to show the spread.
        "api_per_cpu_s_runs": [
            round(rate.moved / used["api"]) for rate, used, _ in runs if series.via == "http" and used["api"]
        ],
        "postgresql_per_cpu_s_runs": [
            round(rate.moved / used["postgresql"]) for rate, used, _ in runs if used["postgresql"]
        ],
        # Over the seconds the clients ran (the rest of the window, the load generator starting, is idle).
        "api_cores_busy": cpu["api"] / measured if measured else None,
        "postgresql_cores_busy": cpu["postgresql"] / measured if measured else None,
    }


def idle(ctx: Context, meters: Meters) -> dict[str, float]:
    """The API and PostgreSQL with no requests at all: CPU-seconds per minute."""
    seconds = 3.0 if ctx.quick else 15.0
    with connect(ctx) as conn:
        before = meters.read(conn)
        time.sleep(seconds)
        after = meters.read(conn)
    wall = after["at"] - before["at"]
    return {
        "seconds": wall,
        "api_cpu_s_per_minute": (after["api"] - before["api"]) / wall * 60,
        "postgresql_cpu_s_per_minute": (after["postgresql"] - before["postgresql"]) / wall * 60,
    }


def run(ctx: Context) -> dict[str, Any]:
    bench_queue(ctx, 0)
    with connect(ctx) as conn:
        postmaster = postmaster_of(conn)
        others = other_backends(conn)
    with serve(ctx.database_url, log_dir=ctx.work_dir) as server:
        meters = Meters(api=server.process.pid, postmaster=postmaster)
        at_rest = idle(ctx, meters)
        chosen = series_of(ctx, server.url)
        taken: dict[str, list[tuple[Rate, dict[str, float], int]]] = {series.name: [] for series in chosen}
        batch = 0
        for _ in range(ctx.rounds):
            for series in chosen:
                batch += 1
                most = max((rate.moved + CLIENTS * BATCH for rate, _, _ in taken[series.name]), default=0)
                need = max(series.guess, 2 * most) if series.guess else 0
                taken[series.name].append(measured_once(ctx, series, meters, batch, need))
    with connect(ctx) as conn:
        others = max(others, other_backends(conn))
    rows = [summary(series, taken[series.name]) for series in chosen]
    return {
        "clients": CLIENTS,
        "duration_s": duration(ctx),
        "rounds": ctx.rounds,
        "batch": BATCH,
        "postmaster_pid": postmaster,
        "other_database_backends": others,
        "idle": at_rest,
        "series": rows,
        "against_sql": against_sql(rows),
        "growth": growth(ctx, postmaster),
    }


def against_sql(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per operation: PostgreSQL's CPU per task through HTTP over its CPU per task for the raw-SQL
    baseline (1.0: the API adds no database work), and the same for WAL."""
    found: dict[str, Any] = {}
    for operation in sorted({row["operation"] for row in rows}):
        http = next(row for row in rows if row["operation"] == operation and row["via"] == "http")
        sql = next(row for row in rows if row["operation"] == operation and row["via"] == "sql")
        cost_http = http["cpu_s"]["postgresql"] / http["tasks"] if http["tasks"] else None
        cost_sql = sql["cpu_s"]["postgresql"] / sql["tasks"] if sql["tasks"] else None
        found[operation] = {
            "postgresql_cpu_ratio": cost_http / cost_sql if cost_http and cost_sql else None,
            "wal_ratio": (
                http["wal_bytes_per_task"] / sql["wal_bytes_per_task"] if sql["wal_bytes_per_task"] else None
            ),
            "rate_ratio": http["per_second"] / sql["per_second"] if sql["per_second"] else None,
        }
    return found
