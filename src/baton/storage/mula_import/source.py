"""mula's database, read for `baton import-mula`: one connection, one snapshot, never a write.

The connection's every transaction is read-only (`default_transaction_read_only`, a server option of the
connection) and the import reads in one REPEATABLE READ READ ONLY transaction, so every table is read as
it was at one instant and nothing of mula's changes: an operator can roll back to mula until Baton has
run. Rows come through server-side cursors a batch at a time (flat memory, whatever the table's size).

mula's tables are read from the schema the URL's own `search_path` option names, else `public`, where
mula's migrations made them: never from a schema of Baton's that happens to come first on the server's
default path (`"$user"`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.rows import args_row

from baton.core.diagnosis import reason
from baton.core.errors import ConfigurationError
from baton.core.mula import MulaLayout, MulaRun, MulaSchedule, MulaTask, SchemaFacts
from baton.core.settings import normalise_database_url
from baton.storage.foreign_tables import schema_facts
from baton.storage.urls import database_address

ARGUMENT = "MULA_DATABASE_URL"
CONNECT_TIMEOUT_SECONDS = 10
READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"
MULA_SCHEMA = "public"  # where mula's migrations make its tables (its URL names no other)

# The organisation of a row: the column (revision 0009 on) or, at 0008, what mula's migration 0009 fills
# it with (its UPDATEs in order, the last that finds a value wins).
_SCHEDULE_ORGANISATION_0008 = (
    "coalesce(data->>'organisation_id', data->'raw_data'->'boefje_meta'->>'organization', data->>'organization')"
)


def _schedule_organisation(layout: MulaLayout) -> str:
    return "organisation" if layout.has_organisation else _SCHEDULE_ORGANISATION_0008


def _task_organisation(layout: MulaLayout, table: str = "") -> str:
    """The organisation of a row of `tasks` (`table`: its alias in the statement, if any)."""
    t = f"{table}." if table else ""
    if layout.has_organisation:
        return f"{t}organisation"
    return (
        f"CASE {t}type WHEN 'boefje' THEN {t}data->>'organization' "
        f"WHEN 'normalizer' THEN {t}data->'raw_data'->'boefje_meta'->>'organization' "
        f"WHEN 'report' THEN {t}data->>'organisation_id' END"
    )


@dataclass(frozen=True)
class SourceCounts:
    """How many rows of each kind the snapshot holds (the progress bars' lengths)."""

    schedules: int
    finished_tasks: int  # every task but the queued ones
    queued_tasks: int
    boefje_tasks: int  # boefje tasks with a hash: at least as many as the (boefje, object) pairs they ran
    queued_duplicates: int  # queued tasks after the first of the same hash in one queue


class MulaSnapshot:
    """The open snapshot: the catalogue's facts, counts, and the rows of each kind in batches."""

    def __init__(self, conn: psycopg.Connection[Any], description: str) -> None:
        self.conn = conn
        self.description = description
        self._cursors = 0

    def facts(self) -> SchemaFacts:
        return schema_facts(lambda sql: self.conn.execute(sql).fetchall(), self.description)

    def _scalar(self, sql: str) -> int:
        row = self.conn.execute(sql).fetchone()
        return int(row[0] or 0) if row else 0

    def counts(self, layout: MulaLayout) -> SourceCounts:
        """One look at each table (the progress bars' lengths): no sort, whatever the size."""
        organisation = _task_organisation(layout)
        row = self.conn.execute(
            "SELECT count(*) FILTER (WHERE status <> 'QUEUED'), count(*) FILTER (WHERE status = 'QUEUED'), "
            "count(*) FILTER (WHERE type = 'boefje' AND hash IS NOT NULL) FROM tasks"
        ).fetchone()
        finished, queued, boefje = (int(value or 0) for value in row) if row else (0, 0, 0)
        return SourceCounts(
            schedules=self._scalar("SELECT count(*) FROM schedules"),
            finished_tasks=finished,
            queued_tasks=queued,
            boefje_tasks=boefje,
            queued_duplicates=self._scalar(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM tasks "
                "WHERE status = 'QUEUED' AND hash IS NOT NULL "
                f"GROUP BY type, coalesce({organisation}, scheduler_id), hash HAVING count(*) > 1) AS twice"
            ),
        )

    def organisations(self, layout: MulaLayout) -> list[tuple[str | None, str | None]]:
        """Every (organisation, scheduler id where the organisation is not known) pair the rows name:
        few, however many rows there are."""
        schedules, tasks = _schedule_organisation(layout), _task_organisation(layout)
        rows = self.conn.execute(
            f"""
            SELECT DISTINCT organisation, CASE WHEN organisation IS NULL THEN scheduler_id END
            FROM (SELECT {schedules} AS organisation, scheduler_id FROM schedules
                  UNION ALL SELECT {tasks} AS organisation, scheduler_id FROM tasks) AS named
            """
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    def schedules(self, layout: MulaLayout, batch: int) -> Iterator[list[MulaSchedule]]:
        yield from self._batches(
            f"""SELECT id, scheduler_id, {_schedule_organisation(layout)}, hash, data::text, enabled, schedule,
                       deadline_at, created_at, modified_at
                FROM schedules""",
            MulaSchedule,
            batch,
        )

    def tasks(self, layout: MulaLayout, batch: int, *, queued: bool) -> Iterator[list[MulaTask]]:
        """Tasks that are not queued (in the table's order), or the queued ones in mula's pop order
        (`priority`, NULL last, then `created_at`; the id settles ties)."""
        where = "status = 'QUEUED' ORDER BY priority, created_at, id" if queued else "status <> 'QUEUED'"
        yield from self._batches(
            f"""SELECT id, scheduler_id, {_task_organisation(layout)}, type, status::text, priority, hash,
                       schedule_id, data::text, created_at, modified_at
                FROM tasks WHERE {where}""",
            MulaTask,
            batch,
        )

    def boefje_runs(self, layout: MulaLayout, batch: int) -> Iterator[list[MulaRun]]:
        """Per hash of a boefje task, its latest task (by `created_at`, as mula looks it up)."""
        yield from self._batches(
            f"""SELECT {_task_organisation(layout, "t")}, t.scheduler_id, t.data->'boefje'->>'id',
                       t.data->>'input_ooi', t.modified_at
                FROM (SELECT DISTINCT ON (hash) id FROM tasks WHERE type = 'boefje' AND hash IS NOT NULL
                      ORDER BY hash, created_at DESC) AS latest
                JOIN tasks AS t ON t.id = latest.id""",
            MulaRun,
            batch,
        )

    def _batches(self, sql: str, row_type: Any, batch: int) -> Iterator[list[Any]]:
        self._cursors += 1
        cursor_name = f"mula_import_{self._cursors}"  # binary: no text made of uuids, times or numbers
        with self.conn.cursor(name=cursor_name, row_factory=args_row(row_type), binary=True) as cursor:
            cursor.itersize = batch
            cursor.execute(sql)
            while rows := cursor.fetchmany(batch):
                yield rows


def _options(given: str) -> str:
    path = "" if "search_path" in given else f" -c search_path={MULA_SCHEMA}"
    return f"{given}{path} {READ_ONLY_OPTIONS}".strip()


@contextmanager
def open_snapshot(url: str) -> Iterator[MulaSnapshot]:
    """mula's database at `url` in one read-only REPEATABLE READ transaction, rolled back at the end;
    a ConfigurationError in one line when it cannot be reached."""
    url = normalise_database_url(url)
    try:
        address = database_address(url)
    except ConfigurationError as exc:
        raise ConfigurationError(str(exc).replace("BATON_DATABASE_URL", ARGUMENT)) from exc
    if address.backend != "postgresql":
        raise ConfigurationError(f"{ARGUMENT}: mula's database is PostgreSQL; got {address.describe()}")
    description = address.describe()
    given = address.options_with("")  # the URL's options, or PGOPTIONS
    try:
        conn = psycopg.connect(
            address.conninfo,
            options=_options(given),
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name="baton import-mula",
        )
    except psycopg.Error as exc:
        raise ConfigurationError(
            f"cannot reach mula's database, {description} ({reason(exc)}); check {ARGUMENT}"
        ) from exc
    try:
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        yield MulaSnapshot(conn, description)
    except psycopg.OperationalError as exc:
        raise ConfigurationError(f"lost mula's database, {description} ({reason(exc)})") from exc
    finally:
        with contextlib.suppress(psycopg.Error):  # nothing was written; a broken connection has nothing to undo
            conn.rollback()
        conn.close()
