"""The capacity section: CPU per operation for the API and PostgreSQL, WAL per operation, table growth,
and the capacity model docs/scaling.md explains (an OpenKAT task = 1 push + 1 pop + 2 status changes)."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, runs, table

# What one OpenKAT task costs: pushed once, popped once; its runner reports `running`, reads the task
# back (`GET /tasks/{id}`: still running?) and reports `completed` (or `failed`): two status changes,
# each measured as the PATCH dispatched -> completed, and one read.
TASK = (("push", 1), ("pop", 1), ("read", 1), ("patch", 2))
TASK_BATCHED = (("push", 1), ("pop limit=10", 1), ("read", 1), ("patch", 2))
# Installation sizes: organisations, each with 1,000 objects x 20 boefjes rescanned daily.
SIZES = (10, 100, 1_000, 10_000)
TASKS_PER_ORGANISATION_DAY = 1_000 * 20
DAY = 86_400
GIB = 1024**3


def _row(result: dict[str, Any], operation: str, via: str) -> dict[str, Any]:
    return next(row for row in result["series"] if row["operation"] == operation and row["via"] == via)


def per_task(result: dict[str, Any], recipe: tuple[tuple[str, int], ...] = TASK) -> dict[str, float]:
    """CPU-seconds of the API and of PostgreSQL, and WAL bytes, for one task through HTTP."""
    api = postgresql = wal = 0.0
    for operation, times in recipe:
        row = _row(result, operation, "http")
        api += times * row["cpu_s"]["api"] / row["tasks"]
        postgresql += times * row["cpu_s"]["postgresql"] / row["tasks"]
        wal += times * row["wal_bytes_per_task"]
    return {"api_s": api, "postgresql_s": postgresql, "wal_bytes": wal}


def installations(result: dict[str, Any]) -> list[dict[str, float]]:
    """The capacity model: per installation size, tasks a day, cores needed at the average rate, and
    the tasks table at 30 and 7 days' retention (packed rows: the estimate; see the section)."""
    cost = per_task(result)
    batched = per_task(result, TASK_BATCHED)
    packed = result["growth"]["tasks_packed"]["bytes_per_row"]
    rows = []
    for organisations in SIZES:
        per_day = organisations * TASKS_PER_ORGANISATION_DAY
        per_second = per_day / DAY
        rows.append(
            {
                "organisations": organisations,
                "tasks_per_day": per_day,
                "tasks_per_second": per_second,
                "api_cores": per_second * cost["api_s"],
                "api_cores_batched": per_second * batched["api_s"],
                "postgresql_cores": per_second * cost["postgresql_s"],
                "postgresql_cores_batched": per_second * batched["postgresql_s"],
                "wal_gib_per_day": per_day * cost["wal_bytes"] / GIB,
                "table_gib_30_days": per_day * 30 * packed / GIB,
                "table_gib_7_days": per_day * 7 * packed / GIB,
            }
        )
    return rows


def _spread(value: float | None, values: list[float]) -> str:
    if len(values) < 2:
        return num(value)
    return f"{num(value)} ({num(min(values))} to {num(max(values))})"


def _series_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for row in result["series"]:
        http = row["via"] == "http"
        measured = result["duration_s"] * row["rounds"]  # the seconds the clients ran
        name = row["series"] + (" (**ran dry: invalid**)" if row["ran_dry"] else "")
        rows.append(
            [
                name,
                num(row["per_second"]),
                runs(row),
                _spread(row["tasks_per_api_cpu_s"], row.get("api_per_cpu_s_runs", [])) if http else "—",
                _spread(row["tasks_per_postgresql_cpu_s"], row.get("postgresql_per_cpu_s_runs", [])),
                num(row["calls_per_postgresql_cpu_s"]),
                num(row["cpu_s"]["api"] / measured, 2) if http else "—",
                num(row["cpu_s"]["postgresql"] / measured, 2),
                num(row["calls_per_loadgen_cpu_s"]),
                num(row["wal_bytes_per_task"]),
                num(row.get("checkpoints")),
            ]
        )
    return rows


def _growth_rows(growth: dict[str, Any]) -> list[list[str]]:
    labels = (
        ("tasks_packed", "`tasks`, completed, packed (`VACUUM FULL`)"),
        ("tasks_lifecycle", "`tasks`, completed, after the lifecycle and `VACUUM`"),
        ("events", "`events` (consumed `scan_profile_mutation`)"),
        ("boefje_runs", "`boefje_runs` (organisation, boefje, object)"),
    )
    rows = []
    for key, label in labels:
        size = growth[key]
        rows.append(
            [
                label,
                num(size["rows"]),
                num(size["bytes_per_row"]),
                num(size["heap_bytes"] / size["rows"]),
                num(size["index_bytes"] / size["rows"]),
                num(size["toast_bytes"] / size["rows"], 1),
            ]
        )
    return rows


def section_capacity(result: dict[str, Any]) -> list[str]:
    idle = result["idle"]
    growth = result["growth"]
    cost = per_task(result)
    batched = per_task(result, TASK_BATCHED)
    others = result["other_database_backends"]
    shared = (
        f" **{others} client backend(s) of other databases were connected: their work is counted too.**"
        if others
        else " No other database had a client connected (the PostgreSQL server was this run's own)."
    )
    ratio_rows = [
        [
            operation,
            pct(found["rate_ratio"]),
            num(found["postgresql_cpu_ratio"], 2),
            num(found["wal_ratio"], 2),
        ]
        for operation, found in result["against_sql"].items()
    ]
    model_rows = [
        [
            num(row["organisations"]),
            num(row["tasks_per_day"] / 1e6, 1) + " M",
            num(row["tasks_per_second"]),
            f"{num(row['api_cores'], 2)} ({num(row['api_cores_batched'], 2)})",
            f"{num(row['postgresql_cores'], 2)} ({num(row['postgresql_cores_batched'], 2)})",
            num(row["wal_gib_per_day"], 1),
            num(row["table_gib_30_days"]),
            num(row["table_gib_7_days"]),
        ]
        for row in installations(result)
    ]
    return [
        "## Capacity: CPU per operation",
        "",
        measured_on(result),
        "",
        f"One `baton serve --no-director` on PostgreSQL, {result['clients']} clients per series for "
        f"{result['duration_s']:g} s, {result['rounds']} rounds interleaved; before each series its tasks are "
        "prepared (queued tasks for pops, dispatched ones for PATCHes, each client its own) and the table "
        "vacuumed and analysed, outside the measurement. Around each series the CPU time (user + system, "
        "`/proc/<pid>/stat`, children waited for included) of the API process tree, of the PostgreSQL server "
        "(its postmaster and every child: backends, WAL writer, checkpointer, autovacuum) and of the load "
        "generator is read, and the WAL position (`pg_current_wal_lsn()`). Totals over the rounds; a task "
        "per CPU-second is a task per core at 100 % use (in brackets: the lowest and highest round); "
        "*cores busy*: CPU-seconds over the seconds measured. "
        "The window also holds each client's one uncounted warm-up call (counted here) and the load "
        "generator's start-up, which costs the API and PostgreSQL next to nothing (idle, the API used "
        f"{num(idle['api_cpu_s_per_minute'], 2)} and PostgreSQL {num(idle['postgresql_cpu_s_per_minute'], 2)} "
        f"CPU-seconds a minute over {idle['seconds']:.0f} s)."
        f'{shared} PATCH: `PATCH /tasks/{{id}}` `{{"status": "completed"}}` of a dispatched task; raw UPDATE: '
        "Baton's own status statement (`statements.change_status`) via psycopg; GET task: `GET /tasks/{id}`, "
        "raw SELECT: the row by its id; pop and push baselines as in "
        "the hot-path and push sections. The server runs with `fsync=off` (a throw-away test server): CPU "
        "and WAL volume are as with fsync on, commit latency is not.",
        "",
        *table(
            [
                "series",
                "tasks/s",
                "range",
                "tasks per API CPU-s",
                "tasks per PostgreSQL CPU-s",
                "statements or requests per PostgreSQL CPU-s",
                "API cores busy",
                "PostgreSQL cores busy",
                "calls per load-generator CPU-s",
                "WAL bytes per task",
                "checkpoints",
            ],
            _series_rows(result),
        ),
        "WAL includes full-page images: the first change of a page after a checkpoint has begun writes the "
        "whole page. The series that first changes many pages after the fills that precede it (which write much "
        "WAL and bring checkpoints) pays for them, HTTP pop first in each round; *checkpoints*: those "
        "`pg_stat_bgwriter` counted during the series' windows. So WAL per task varies between series far more "
        "than CPU does: read it as an order of magnitude.",
        "",
        "Through HTTP against the raw-SQL baseline of the same operation (PostgreSQL's CPU and WAL per task; "
        "below 1: the API's grouping saves the database work):",
        "",
        *table(
            ["operation", "rate / raw SQL", "PostgreSQL CPU per task / raw SQL", "WAL per task / raw SQL"], ratio_rows
        ),
        "**The capacity model** ([scaling.md](scaling.md)): one OpenKAT task is 1 push, 1 pop, 1 read and 2 status "
        "changes (its runner reports `running`, reads the task back, then reports `completed` or `failed`). "
        "From the rows above, one task costs "
        f"**{num(cost['api_s'] * 1000, 2)} ms of API CPU** and **{num(cost['postgresql_s'] * 1000, 2)} ms of "
        f"PostgreSQL CPU** and writes **{num(cost['wal_bytes'] / 1024, 1)} KiB of WAL**: "
        f"{num(1 / cost['api_s'])} tasks per API core-second, {num(1 / cost['postgresql_s'])} per PostgreSQL "
        f"core-second (popped 10 at a time: {num(batched['api_s'] * 1000, 2)} ms and "
        f"{num(batched['postgresql_s'] * 1000, 2)} ms). Installations of N organisations, each 1,000 objects x "
        "20 boefjes rescanned daily, at the average rate (in brackets: pops of 10); the tasks table at packed "
        "rows (below):",
        "",
        *table(
            [
                "organisations",
                "tasks a day",
                "tasks/s (average)",
                "API cores",
                "PostgreSQL cores",
                "WAL GiB a day",
                "`tasks` GiB, 30 days",
                "`tasks` GiB, 7 days",
            ],
            model_rows,
        ),
        f"**Table growth**: {growth['tasks_packed']['rows']:,} boefje tasks ({growth['boefjes']} boefjes of the "
        f"catalogue x {growth['objects']:,} objects, 100 organisations) with OpenKAT's task data as Baton stores it "
        f"({growth['data_json_chars']} characters of JSON, {growth['data_stored_bytes']} bytes as `jsonb`), taken "
        "through the lifecycle (queued, dispatched, running, completed: each step a new row version, every index "
        "updated), then measured with `pg_total_relation_size` (heap, indexes, TOAST). *Packed* is the row alone, "
        "what a table whose dead versions autovacuum returns for reuse settles near; *after the lifecycle* still "
        "holds the space of each task's three dead versions (vacuumed, not returned to the file system): the "
        "bound when dead space is not reused. 100,000 consumed events and 100,000 `boefje_runs` rows likewise.",
        "",
        *table(["table", "rows", "bytes per row", "heap", "indexes", "TOAST"], _growth_rows(growth)),
        *_retention_lines(growth, result),
    ]


def _retention_lines(growth: dict[str, Any], result: dict[str, Any]) -> list[str]:
    removal = growth.get("retention")
    if not removal or not removal["rows"]:
        return []
    rows = removal["rows"]
    per_row = (removal["delete_cpu_s"] + removal["vacuum_cpu_s"]) / rows
    wal_per_row = (removal["delete_wal_bytes"] + removal["vacuum_wal_bytes"]) / rows
    deleting = f"{num(removal['delete_cpu_s'], 2)} CPU-s ({num(removal['delete_wal_bytes'] / rows)} bytes of WAL a row)"
    vacuuming = f"{num(removal['vacuum_cpu_s'], 2)} CPU-s ({num(removal['vacuum_wal_bytes'] / rows)} bytes a row)"
    largest = installations(result)[-1]
    return [
        f"**Retention's cost**: the same {rows:,} finished tasks deleted as the housekeeper deletes them "
        f"(`storage.retention.delete_finished`, batches of {removal['batch']:,}, a transaction each), then "
        f"`VACUUM tasks`: PostgreSQL used {deleting} in all to delete them, and {vacuuming} to vacuum "
        f"({removal['checkpoints']} checkpoint(s) meanwhile): **{num(per_row * 1e6)} µs of PostgreSQL CPU and "
        f"{num(wal_per_row)} bytes of WAL per task removed**. At {num(largest['organisations'])} organisations "
        f"({num(largest['tasks_per_second'])} tasks finishing a second) that is "
        f"{num(largest['tasks_per_second'] * per_row, 2)} PostgreSQL cores and "
        f"{num(largest['tasks_per_second'] * wal_per_row / 1e6, 1)} MB/s of WAL, around the clock. (A table that "
        "fits in memory: on a larger one each batch also reads its pages from disk, time rather than CPU.)",
        "",
    ]
