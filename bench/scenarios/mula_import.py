"""Taking over mula's database (`baton import-mula`, issue #39): a mula-shaped database (the stand-in of
harness/standins/mula_db.py at revision 0010) with 1,000,000 boefje tasks and 100,000 schedules over 100
organisations, imported by the command as an operator runs it (a process of its own), into Baton's tables
in schema `baton` of the same database (BATON_DATABASE_SCHEMA, as OpenKAT's packages do).

Measured: rows (tasks and schedules) per second of the whole command, against a raw `INSERT ... SELECT` of
the same rows into the same tables in the same run (organisations and their queues, schedules, tasks and the
grace period's `boefje_runs`, one statement each: what a migration inside the database would cost, with
every index and trigger of Baton's tables), before and after the import (their mean); and the command's
peak memory (its resident set's high-water mark, from the kernel) at 100,000 and at 1,000,000 tasks: it
streams, so it should not grow with the rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import psycopg

from baton.storage.engine import Store
from baton.storage.urls import libpq_conninfo
from bench.scenarios.common import Context, connect, ratio
from harness.standins.mula_db import MulaDatabase

ORGANISATIONS = 100
SCHEMA = "baton"
BATON_TABLES = "organisations, schedules, tasks, boefje_runs, queue_counters, mula_imports"
RAW_COPY = [
    """INSERT INTO organisations (id, name, created_at, weight, source)
       SELECT DISTINCT organisation, organisation, now(), 1, 'katalogus' FROM public.tasks""",
    """INSERT INTO schedulers (id, organisation, type, maxsize, enabled, state, created_at, term)
       SELECT t || '-' || o.id, o.id, t, 10000, true, 'stopped', now(), 0
       FROM organisations AS o, unnest(ARRAY['boefje', 'normalizer', 'report']) AS t""",
    """INSERT INTO schedules (id, scheduler_id, organisation, hash, data, enabled, schedule, deadline_at,
                              created_at, modified_at)
       SELECT id, split_part(scheduler_id, '-', 1), organisation, hash, data, enabled, schedule, deadline_at,
              created_at, modified_at
       FROM public.schedules""",
    """INSERT INTO tasks (id, scheduler_id, schedule_id, organisation, type, priority, status, hash, data,
                          fair_key, attempts, created_at, modified_at)
       SELECT id, type || '-' || organisation, schedule_id::text, organisation, type,
              coalesce(priority, 2147483647), lower(status::text), hash, data, 0, 0, created_at, modified_at
       FROM public.tasks""",
    """INSERT INTO boefje_runs (organisation, boefje_id, object_key, queued_at)
       SELECT DISTINCT ON (hash) organisation, data->'boefje'->>'id', data->>'input_ooi', modified_at
       FROM public.tasks WHERE type = 'boefje' AND hash IS NOT NULL
       ORDER BY hash, created_at DESC""",
]


def in_schema(conninfo: str) -> psycopg.Connection[Any]:
    return psycopg.connect(conninfo, options=f"-c search_path={SCHEMA}", autocommit=True)


def raw_copy(conninfo: str) -> float:
    """Seconds the raw INSERT ... SELECT of every row takes (Baton's tables emptied first and after)."""
    with in_schema(conninfo) as conn:
        conn.execute(f"TRUNCATE {BATON_TABLES} CASCADE")
        started = time.perf_counter()
        for statement in RAW_COPY:
            conn.execute(statement)
        seconds = time.perf_counter() - started
        conn.execute(f"TRUNCATE {BATON_TABLES} CASCADE")
    return seconds


def command(conninfo: str) -> tuple[float, float, str]:
    """`baton import-mula` in a process of its own: wall seconds, peak resident memory (MiB, the kernel's
    high-water mark of that process alone), its summary."""
    env = {**os.environ, "BATON_DATABASE_URL": conninfo, "BATON_DATABASE_SCHEMA": SCHEMA, "BATON_LOG_LEVEL": "warning"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "baton", "import-mula", conninfo], env=env, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(process.pid, 0)  # reaped here, with its own resource usage
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"import-mula failed: {err.read().strip()}")
        return seconds, usage.ru_maxrss / 1024, out.read()


def measure(ctx: Context, tasks: int, schedules: int, organisations: int) -> dict[str, Any]:
    name = f"mula_import_{uuid.uuid4().hex[:8]}"
    admin = ctx.libpq
    with connect(ctx) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    conninfo = libpq_conninfo(ctx.database_url, dbname=name)
    try:
        started = time.perf_counter()
        MulaDatabase(conninfo, "0010").create().bulk(organisations, schedules, tasks, queued=schedules // 2)
        filled = time.perf_counter() - started
        store = Store(conninfo, SCHEMA)
        store.migrate()
        store.dispose()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        raw_before = raw_copy(conninfo)
        seconds, peak_mib, summary = command(conninfo)
        with in_schema(conninfo) as conn:
            imported = conn.execute("SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM schedules)").fetchone()
        raw_after = raw_copy(conninfo)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    rows = tasks + schedules
    raw_seconds = (raw_before + raw_after) / 2
    return {
        "tasks": tasks,
        "schedules": schedules,
        "organisations": organisations,
        "queued": schedules // 2,
        "rows": rows,
        "complete": imported == (tasks, schedules),
        "fill_seconds": filled,
        "import_seconds": seconds,
        "raw_seconds": raw_seconds,
        "raw_runs": [raw_before, raw_after],
        "import_rows_per_second": rows / seconds,
        "raw_rows_per_second": rows / raw_seconds,
        "peak_rss_mib": peak_mib,
        "summary": summary.strip().splitlines(),
    }


def run(ctx: Context) -> dict[str, Any]:
    organisations = ctx.size(ORGANISATIONS, 10)
    small = measure(ctx, ctx.size(100_000, 2_000), ctx.size(10_000, 200), organisations)
    large = measure(ctx, ctx.size(1_000_000, 20_000), ctx.size(100_000, 2_000), organisations)
    return {
        "sizes": [small, large],
        "complete": small["complete"] and large["complete"],
        "ratios": {
            "import_to_raw": ratio(large["import_rows_per_second"], large["raw_rows_per_second"]),
            "import_to_raw_small": ratio(small["import_rows_per_second"], small["raw_rows_per_second"]),
            "peak_rss_large_to_small": ratio(large["peak_rss_mib"], small["peak_rss_mib"]),
        },
    }
