"""Baton's side of `baton import-mula`: the import's record, what Baton's database already holds, and
the rows written a batch at a time (one transaction each, the caller's session).

Every row goes in through the tables, so the triggers keep the queue counters (queued, in flight) as for
any other write, and `ON CONFLICT DO NOTHING` leaves a row already there as it is: a run again after one
that stopped half-way adds only what is missing, and changes nothing Baton has changed since. The seq of
a task is its insertion order: queued tasks come in mula's pop order, so a queue's pop (`priority`, then
`seq`) and a pop across organisations (`priority`, then the fair tag, 0 for every imported task, then
`seq`) hand them out in that order; a queued task whose hash is queued in its queue already (Baton's
unique index) comes in cancelled instead (core/mula.py says why).

PostgreSQL: a first import copies each batch (COPY, binary) straight into the table; otherwise each batch
is copied into a temporary table and inserted from there by one statement that leaves out what is there
(one trigger run per batch either way). `data` goes in as the text mula's jsonb printed, so it is the same
jsonb.
SQLite: one executemany per batch, `data` stored as that text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy import Text, bindparam, func, inspect, select, tuple_, type_coerce
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from baton.core.catalogue import KATALOGUS_SOURCE
from baton.core.model import TaskStatus
from baton.core.mula import DUPLICATE_REASON, ImportedRun, ImportedSchedule, ImportedTask, foreign_tables
from baton.core.settings import normalise_database_url
from baton.storage.control.liveness import read_only_connection
from baton.storage.control.organisations import ensure_organisation
from baton.storage.engine import applied_revision, on_postgresql
from baton.storage.foreign_tables import schema_facts
from baton.storage.tables import (
    BoefjeRun,
    LeaderRecord,
    LeaseHolder,
    MulaImport,
    Schedule,
    Task,
    WorkerRecord,
)
from baton.storage.urls import database_address

RECORD_ID = 1

# -- the record --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportRecord:
    """The import's row, as the command reports it."""

    source: str
    revision: str
    started_at: datetime
    finished_at: datetime | None
    summary: dict[str, Any] | None


def import_record(session: Session) -> ImportRecord | None:
    row = session.get(MulaImport, RECORD_ID)
    if row is None:
        return None
    return ImportRecord(row.source, row.revision, row.started_at, row.finished_at, row.summary)


def begin_record(session: Session, source: str, revision: str, now: datetime) -> None:
    session.add(MulaImport(id=RECORD_ID, source=source[:512], revision=revision, started_at=now))


def finish_record(session: Session, summary: dict[str, Any], now: datetime) -> None:
    record = session.get(MulaImport, RECORD_ID)
    assert record is not None, "finish_record without begin_record"
    record.finished_at = now
    record.summary = summary


@dataclass(frozen=True)
class OwnRows:
    """Tasks and schedules in Baton's database (before a first import: Baton's own)."""

    tasks: int
    schedules: int


def own_rows(session: Session) -> OwnRows:
    return OwnRows(
        tasks=session.scalar(select(func.count()).select_from(Task)) or 0,
        schedules=session.scalar(select(func.count()).select_from(Schedule)) or 0,
    )


def activity_since(session: Session, since: datetime) -> str | None:
    """What shows that Baton ran after `since` (None: nothing does): a task it changed, a director's or
    worker's renewal."""
    checks = (
        ("a task changed", select(func.max(Task.modified_at))),
        ("a director renewed its leadership", select(func.max(LeaderRecord.renewed_at))),
        ("a scheduler's lease was renewed", select(func.max(LeaseHolder.renewed_at))),
        ("a worker's heartbeat", select(func.max(WorkerRecord.heartbeat_at))),
    )
    for what, latest in checks:
        when = session.scalar(latest)
        if when is not None and when > since:
            return f"{what} at {when.isoformat(timespec='seconds')}"
    return None


# -- Baton's database before it is migrated (a dry run writes nothing, not even a migration) -----------


@dataclass(frozen=True)
class TargetState:
    """Baton's database as a dry run finds it."""

    exists: bool
    revision: str | None = None
    record: ImportRecord | None = None
    rows: OwnRows | None = None
    foreign: str | None = None  # why `baton migrate` would refuse it (it holds mula's tables)


def inspect_target(url: str, schema: str | None) -> TargetState:
    """Baton's database read without writing (SQLite: a file that does not exist is not created)."""
    address = database_address(normalise_database_url(url), schema)
    if address.backend == "sqlite":
        path = make_url(address.url).database
        if not path or path == ":memory:" or not Path(path).expanduser().exists():
            return TargetState(exists=False)
    with read_only_connection(url, schema, "baton import-mula") as conn:
        if address.backend == "postgresql":
            facts = schema_facts(lambda sql: [tuple(row) for row in conn.exec_driver_sql(sql)], address.describe())
            foreign = foreign_tables(facts)
            if foreign is not None:
                return TargetState(exists=True, foreign=foreign)
        revision = applied_revision(conn)
        if revision is None:
            return TargetState(exists=True)
        names = set(inspect(conn).get_table_names())
        with Session(conn) as session:
            record = import_record(session) if MulaImport.__tablename__ in names else None
            rows = own_rows(session) if {"tasks", "schedules"} <= names else None
        return TargetState(exists=True, revision=revision, record=record, rows=rows)


# -- rows ------------------------------------------------------------------------------------------


def add_organisations(session: Session, codes: Sequence[str], maxsize: int) -> int:
    """Each organisation with its three queues, as Baton makes one, marked as KATalogus' (in OpenKAT
    every organisation is); one already there is left as it is. How many were added."""
    return sum(ensure_organisation(session, code, maxsize, source=KATALOGUS_SOURCE) for code in codes)


_TASK_COLUMNS = (
    "id",
    "scheduler_id",
    "schedule_id",
    "organisation",
    "type",
    "priority",
    "status",
    "hash",
    "data",
    "reason",
    "created_at",
    "modified_at",
)
_SCHEDULE_COLUMNS = (
    "id",
    "scheduler_id",
    "organisation",
    "hash",
    "data",
    "enabled",
    "schedule",
    "deadline_at",
    "created_at",
    "modified_at",
)
_RUN_COLUMNS = ("organisation", "boefje_id", "object_key", "queued_at")
# The types of the columns a binary COPY writes (as storage/tables.py declares them).
_TASK_TYPES = (
    ("id", "uuid"),
    ("scheduler_id", "text"),
    ("schedule_id", "text"),
    ("organisation", "text"),
    ("type", "text"),
    ("priority", "int4"),
    ("status", "text"),
    ("hash", "text"),
    ("data", "jsonb"),
    ("reason", "text"),
    ("created_at", "timestamptz"),
    ("modified_at", "timestamptz"),
    ("fair_key", "int8"),
    ("attempts", "int4"),
)
_SCHEDULE_TYPES = (
    ("id", "uuid"),
    ("scheduler_id", "text"),
    ("organisation", "text"),
    ("hash", "text"),
    ("data", "jsonb"),
    ("enabled", "bool"),
    ("schedule", "text"),
    ("deadline_at", "timestamptz"),
    ("created_at", "timestamptz"),
    ("modified_at", "timestamptz"),
)


def _task_values(task: ImportedTask) -> tuple[Any, ...]:
    return (
        task.id,
        task.queue,
        task.schedule_id,
        task.organisation,
        task.type,
        task.priority,
        task.status,
        task.hash,
        task.data,
        task.reason,
        task.created_at,
        task.modified_at,
    )


def _schedule_values(schedule: ImportedSchedule) -> tuple[Any, ...]:
    return (
        schedule.id,
        schedule.scheduler_id,
        schedule.organisation,
        schedule.hash,
        schedule.data,
        schedule.enabled,
        schedule.schedule,
        schedule.deadline_at,
        schedule.created_at,
        schedule.modified_at,
    )


@dataclass(frozen=True)
class TaskBatch:
    added: int  # inserted as mula had them
    duplicates: int  # queued in mula, inserted cancelled (the same hash queued in that queue already)


def add_tasks(session: Session, tasks: Sequence[ImportedTask], *, queued: bool, first: bool = False) -> TaskBatch:
    """Insert the tasks Baton does not have yet, in the order given (their seq). `queued`: the batch is
    queued tasks in mula's pop order, any of which may meet its hash queued already. `first`: this run began
    the import into a database without tasks, so none of them can be there yet (not-queued ones are then
    copied straight into the table)."""
    if not tasks:
        return TaskBatch(0, 0)
    if on_postgresql(session):
        if first and not queued:
            _copy_into(session, "tasks", _TASK_TYPES, ((*_task_values(task), 0, 0) for task in tasks))
            return TaskBatch(len(tasks), 0)
        return _add_tasks_postgresql(session, tasks, queued)
    return _add_tasks_sqlite(session, tasks, queued, first)


def add_schedules(session: Session, schedules: Sequence[ImportedSchedule], *, first: bool = False) -> int:
    """Insert the schedules Baton does not have yet; how many. `first`: as for add_tasks (none can be there)."""
    if not schedules:
        return 0
    if on_postgresql(session):
        if first:
            _copy_into(session, "schedules", _SCHEDULE_TYPES, map(_schedule_values, schedules))
            return len(schedules)
        cursor = _copied(session, _SCHEDULES_STAGE, _SCHEDULE_COLUMNS, map(_schedule_values, schedules))
        cursor.execute(_INSERT_SCHEDULES)
        return int(cursor.rowcount)
    present = set(session.scalars(select(Schedule.id).where(Schedule.id.in_([row.id for row in schedules]))))
    fresh = [row for row in schedules if row.id not in present]
    if fresh:
        parameters = [dict(zip(_SCHEDULE_COLUMNS, _schedule_values(row), strict=True)) for row in fresh]
        session.execute(_sqlite_schedules(), parameters)
    return len(set(session.scalars(select(Schedule.id).where(Schedule.id.in_([row.id for row in fresh])))))


def add_boefje_runs(session: Session, runs: Sequence[ImportedRun]) -> int:
    """Record each (boefje, object)'s last run unless Baton has it as late or later; how many changed."""
    if not runs:
        return 0
    if on_postgresql(session):
        values = ((run.organisation, run.boefje_id, run.object_key, run.queued_at) for run in runs)
        cursor = _copied(session, _RUNS_STAGE, _RUN_COLUMNS, values)
        cursor.execute(_UPSERT_RUNS)
        return int(cursor.rowcount)
    latest: dict[tuple[str, str, str], datetime] = {}
    for run in runs:
        key = (run.organisation, run.boefje_id, run.object_key)
        latest[key] = max(run.queued_at, latest.get(key, run.queued_at))
    columns = tuple_(BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key)
    known = {
        (organisation, boefje_id, object_key): queued_at
        for organisation, boefje_id, object_key, queued_at in session.execute(
            select(BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key, BoefjeRun.queued_at).where(
                columns.in_(list(latest))
            )
        )
    }
    changes = [
        {"organisation": org, "boefje_id": boefje, "object_key": obj, "queued_at": when}
        for (org, boefje, obj), when in latest.items()
        if (org, boefje, obj) not in known or known[(org, boefje, obj)] < when
    ]
    if changes:
        upsert = sqlite.insert(BoefjeRun)
        session.execute(
            upsert.on_conflict_do_update(
                index_elements=[BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key],
                set_={"queued_at": upsert.excluded.queued_at},
                where=BoefjeRun.queued_at < upsert.excluded.queued_at,
            ),
            changes,
        )
    return len(changes)


# -- PostgreSQL: COPY into a temporary table, one INSERT ... SELECT from it -----------------------------

_TASKS_STAGE = """CREATE TEMPORARY TABLE IF NOT EXISTS mula_import_tasks (
    ord bigint, id uuid, scheduler_id text, schedule_id text, organisation text, type text, priority integer,
    status text, hash text, data jsonb, reason text, created_at timestamptz, modified_at timestamptz
) ON COMMIT DELETE ROWS"""
_SCHEDULES_STAGE = """CREATE TEMPORARY TABLE IF NOT EXISTS mula_import_schedules (
    ord bigint, id uuid, scheduler_id text, organisation text, hash text, data jsonb, enabled boolean,
    schedule text, deadline_at timestamptz, created_at timestamptz, modified_at timestamptz
) ON COMMIT DELETE ROWS"""
_RUNS_STAGE = """CREATE TEMPORARY TABLE IF NOT EXISTS mula_import_runs (
    ord bigint, organisation text, boefje_id text, object_key text, queued_at timestamptz
) ON COMMIT DELETE ROWS"""

_TASK_INSERT = """INSERT INTO tasks (id, scheduler_id, schedule_id, organisation, type, priority, status, hash, data,
                   fair_key, attempts, reason, created_at, modified_at)"""
_INSERT_TASKS = f"""{_TASK_INSERT}
SELECT id, scheduler_id, schedule_id, organisation, type, priority, status, hash, data, 0, 0, reason,
       created_at, modified_at
FROM mula_import_tasks ORDER BY ord
ON CONFLICT DO NOTHING"""
# The queued tasks the first INSERT left out that Baton has no task of: their hash was queued already.
_INSERT_DUPLICATES = f"""{_TASK_INSERT}
SELECT s.id, s.scheduler_id, s.schedule_id, s.organisation, s.type, s.priority, %(status)s, s.hash, s.data, 0, 0,
       %(reason)s, s.created_at, s.modified_at
FROM mula_import_tasks AS s
WHERE NOT EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = s.id)
ORDER BY s.ord
ON CONFLICT DO NOTHING"""
_INSERT_SCHEDULES = """INSERT INTO schedules (id, scheduler_id, organisation, hash, data, enabled, schedule,
                       deadline_at, created_at, modified_at)
SELECT id, scheduler_id, organisation, hash, data, enabled, schedule, deadline_at, created_at, modified_at
FROM mula_import_schedules ORDER BY ord
ON CONFLICT DO NOTHING"""
_UPSERT_RUNS = """INSERT INTO boefje_runs AS r (organisation, boefje_id, object_key, queued_at)
SELECT DISTINCT ON (organisation, boefje_id, object_key) organisation, boefje_id, object_key, queued_at
FROM mula_import_runs ORDER BY organisation, boefje_id, object_key, queued_at DESC
ON CONFLICT (organisation, boefje_id, object_key) DO UPDATE SET queued_at = excluded.queued_at
WHERE r.queued_at < excluded.queued_at"""


def _copied(session: Session, stage: str, columns: Sequence[str], rows: Any) -> Any:
    """A psycopg cursor in the session's transaction, after copying `rows` into the stage's table."""
    driver = session.connection().connection.driver_connection
    assert driver is not None
    cursor = driver.cursor()
    cursor.execute(stage)
    table = stage.split("EXISTS ", 1)[1].split(" ", 1)[0]
    with cursor.copy(f"COPY {table} (ord, {', '.join(columns)}) FROM STDIN") as copy:
        for position, values in enumerate(rows):
            copy.write_row((position, *values))
    return cursor


class _JsonbText(Dumper):
    """`data` as mula's jsonb printed it, in a binary COPY: jsonb's binary form is a version byte and that
    text, which the server parses once, as it would the text form."""

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: Any) -> bytes:
        return b"\x01" + str(obj).encode()


def _copy_into(session: Session, table: str, columns: Sequence[tuple[str, str]], rows: Any) -> None:
    """COPY straight into one of Baton's tables, in binary (no text to parse but `data`'s); its
    statement-level triggers run as for an INSERT. `columns`: (name, PostgreSQL type) pairs."""
    driver = session.connection().connection.driver_connection
    assert driver is not None
    names = ", ".join(name for name, _ in columns)
    with driver.cursor() as cursor:
        cursor.adapters.register_dumper(None, _JsonbText)
        with cursor.copy(f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([kind for _, kind in columns])
            for values in rows:
                copy.write_row(values)


def _add_tasks_postgresql(session: Session, tasks: Sequence[ImportedTask], queued: bool) -> TaskBatch:
    cursor = _copied(session, _TASKS_STAGE, _TASK_COLUMNS, map(_task_values, tasks))
    cursor.execute(_INSERT_TASKS)
    added = int(cursor.rowcount)
    duplicates = 0
    if queued and added < len(tasks):
        cursor.execute(_INSERT_DUPLICATES, {"status": TaskStatus.CANCELLED.value, "reason": DUPLICATE_REASON})
        duplicates = int(cursor.rowcount)
    return TaskBatch(added, duplicates)


# -- SQLite: executemany ---------------------------------------------------------------------------

_TASKS_TABLE: Any = Task.__table__
_SCHEDULES_TABLE: Any = Schedule.__table__


def _insert_ignoring(table: Any, columns: Sequence[str]) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING with a parameter per column; `data` bound as text (mula's jsonb as
    printed), not re-encoded by the JSON column type."""
    values = {
        name: type_coerce(bindparam(name), Text()) if name == "data" else bindparam(name, type_=table.c[name].type)
        for name in columns
    }
    return sqlite.insert(table).values(values).on_conflict_do_nothing()


def _sqlite_tasks() -> Any:
    return _insert_ignoring(_TASKS_TABLE, _TASK_COLUMNS)


def _sqlite_schedules() -> Any:
    return _insert_ignoring(_SCHEDULES_TABLE, _SCHEDULE_COLUMNS)


def _task_parameters(task: ImportedTask, **changes: Any) -> dict[str, Any]:
    return {**dict(zip(_TASK_COLUMNS, _task_values(task), strict=True)), **changes}


def _ids_present(session: Session, ids: Sequence[Any]) -> set[Any]:
    return set(session.scalars(select(Task.id).where(Task.id.in_(list(ids)))))


def _add_tasks_sqlite(session: Session, tasks: Sequence[ImportedTask], queued: bool, first: bool) -> TaskBatch:
    present = set() if first else _ids_present(session, [task.id for task in tasks])
    fresh = [task for task in tasks if task.id not in present]
    if not fresh:
        return TaskBatch(0, 0)
    session.execute(_sqlite_tasks(), [_task_parameters(task) for task in fresh])
    if not queued:
        return TaskBatch(len(fresh), 0)
    inserted = _ids_present(session, [task.id for task in fresh])
    twice = [task for task in fresh if task.id not in inserted]
    if twice:
        reason = {"status": TaskStatus.CANCELLED.value, "reason": DUPLICATE_REASON}
        session.execute(_sqlite_tasks(), [_task_parameters(task, **reason) for task in twice])
    return TaskBatch(len(inserted), len(twice))
