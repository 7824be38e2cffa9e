"""Table growth, for the capacity scenario (bench/scenarios/capacity.py): bytes per row of `tasks`
(100,000 boefje tasks with OpenKAT's task data, taken through their lifecycle), of consumed `events`
and of `boefje_runs`; and what retention's batched DELETE of those tasks costs PostgreSQL (CPU and
WAL per row, the VACUUM after it included), read as the capacity scenario reads it."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from baton.core.model import utcnow
from baton.storage.queues.retention import delete_finished
from bench.scenarios.common import Context, add_organisations, connect, fresh_database, wal_position
from harness.cputime import tree_seconds

RETENTION_BATCH = 1_000  # as the housekeeper deletes

TASKS = 100_000
BOEFJES = 20
# OpenKAT's boefje task as Baton stores it (core.jobs.job_document of a BoefjeJob): the task's id, the
# boefje as the catalogue describes it, the object, the organisation.
GROWTH_SQL = (
    "WITH t AS MATERIALIZED (SELECT gen_random_uuid() AS id, n, p.id AS boefje, p.name, p.version, p.oci_image,"
    " 'org-' || lpad((n %% 100)::text, 4, '0') AS org,"
    " 'Hostname|internet|host-' || n || '.customer-' || (n %% 100) || '.example.com' AS ooi"
    " FROM (SELECT id, name, version, oci_image FROM plugins WHERE type = 'boefje' ORDER BY id LIMIT %(boefjes)s) AS p,"
    " generate_series(1, %(objects)s) AS n)"
    " INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, hash, data, fair_key, attempts,"
    " created_at, modified_at)"
    " SELECT id, 'boefje-' || org, org, 'boefje', 3, 'queued', md5(ooi || '-' || boefje || '-' || org),"
    " jsonb_build_object('id', id, 'boefje', jsonb_build_object('id', boefje, 'name', name, 'version', version,"
    " 'oci_image', oci_image), 'input_ooi', ooi, 'organization', org, 'deduplication_key', NULL,"
    " 'dispatches', '[]'::jsonb), n::bigint * 1000, 0, now(), now() FROM t"
)
EVENTS_SQL = (
    "INSERT INTO events (scheduler_id, kind, payload, created_at, consumed_at)"
    " SELECT 'boefje-org-' || lpad((n % 100)::text, 4, '0'), 'scan_profile_mutation',"
    " jsonb_build_object('type', 'scan_profile_mutation', 'operation', 'update', 'object', jsonb_build_object("
    "'primary_key', 'Hostname|internet|host-' || n || '.customer-' || (n % 100) || '.example.com',"
    " 'object_type', 'Hostname', 'scan_level', 2)), now(), now() FROM generate_series(1, 100000) AS n"
)
RUNS_SQL = (
    "INSERT INTO boefje_runs (organisation, boefje_id, object_key, queued_at)"
    " SELECT 'org-' || lpad((n %% 100)::text, 4, '0'), p.id,"
    " 'Hostname|internet|host-' || n || '.customer-' || (n %% 100) || '.example.com', now()"
    " FROM (SELECT id FROM plugins WHERE type = 'boefje' ORDER BY id LIMIT %(boefjes)s) AS p,"
    " generate_series(1, %(objects)s) AS n"
)


def sizes(conn: Any, table: str) -> dict[str, int]:
    row = conn.execute(
        "SELECT pg_total_relation_size(%(t)s), pg_relation_size(%(t)s), pg_indexes_size(%(t)s),"
        " (SELECT count(*) FROM " + table + ")",
        {"t": table},
    ).fetchone()
    total, heap, indexes, rows = (int(value) for value in row)
    return {
        "rows": rows,
        "total_bytes": total,
        "heap_bytes": heap,
        "index_bytes": indexes,
        "toast_bytes": total - heap - indexes,
        "bytes_per_row": total // rows if rows else 0,
    }


def growth(ctx: Context, postmaster: int) -> dict[str, Any]:
    fresh_database(ctx)
    organisations = [f"org-{index:04d}" for index in range(100)]
    with connect(ctx) as conn:
        add_organisations(conn, organisations)
        found = conn.execute("SELECT count(*) FROM plugins WHERE type = 'boefje'").fetchone()
        boefjes = min(BOEFJES, int(found[0]))
        shape = {"boefjes": boefjes, "objects": math.ceil(ctx.size(TASKS, 20_000) / boefjes)}
        conn.execute(GROWTH_SQL, shape)
        # The lifecycle, each step a new row version as in real life (pop, running, completed).
        conn.execute("UPDATE tasks SET status = 'dispatched', attempts = 1, modified_at = now()")
        conn.execute("UPDATE tasks SET status = 'running', modified_at = now()")
        conn.execute("UPDATE tasks SET status = 'completed', modified_at = now()")
        conn.execute("VACUUM ANALYZE tasks")
        after_lifecycle = sizes(conn, "tasks")
        conn.execute("VACUUM FULL tasks")
        packed = sizes(conn, "tasks")
        sample = conn.execute("SELECT pg_column_size(data), length(data::text) FROM tasks LIMIT 1").fetchone()
        removal = retention_cost(ctx, conn, postmaster)
        conn.execute(EVENTS_SQL)
        conn.execute("VACUUM ANALYZE events")
        events = sizes(conn, "events")
        conn.execute(RUNS_SQL, shape)
        conn.execute("VACUUM ANALYZE boefje_runs")
        runs = sizes(conn, "boefje_runs")
    return {
        "tasks_lifecycle": after_lifecycle,
        "tasks_packed": packed,
        "data_stored_bytes": int(sample[0]),
        "data_json_chars": int(sample[1]),
        "boefjes": boefjes,
        "objects": shape["objects"],
        "events": events,
        "boefje_runs": runs,
        "retention": removal,
    }


def retention_cost(ctx: Context, conn: Any, postmaster: int) -> dict[str, Any]:
    """Every finished task deleted as the housekeeper deletes them (`storage.retention.delete_finished`,
    batches of 1,000, one transaction each), then `VACUUM tasks`: PostgreSQL's CPU and WAL for each."""
    engine = create_engine(ctx.database_url)
    try:
        start = {"cpu": tree_seconds(postmaster), **wal_position(conn)}
        removed = 0
        with Session(engine) as session:
            while True:
                batch = delete_finished(session, utcnow() + timedelta(days=1), RETENTION_BATCH)
                session.commit()
                if not batch:
                    break
                removed += batch
        deleted = {"cpu": tree_seconds(postmaster), **wal_position(conn)}
        conn.execute("VACUUM tasks")
        vacuumed = {"cpu": tree_seconds(postmaster), **wal_position(conn)}
    finally:
        engine.dispose()
    return {
        "rows": removed,
        "batch": RETENTION_BATCH,
        "delete_cpu_s": deleted["cpu"] - start["cpu"],
        "delete_wal_bytes": deleted["wal"] - start["wal"],
        "vacuum_cpu_s": vacuumed["cpu"] - deleted["cpu"],
        "vacuum_wal_bytes": vacuumed["wal"] - deleted["wal"],
        "checkpoints": vacuumed["checkpoints"] - start["checkpoints"],
    }
