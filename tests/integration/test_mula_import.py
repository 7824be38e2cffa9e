"""`baton import-mula` against a stand-in of mula's database (harness/standins/mula_db.py) at each of the
revisions it reads, into each kind of Baton database: SQLite, a PostgreSQL database of its own, and mula's
own database with Baton's tables in schema `baton` (BATON_DATABASE_SCHEMA, as OpenKAT's packages do).
tests/integration/test_mula_import_real.py runs the same checks against a database mula built itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from baton.core.model import SchedulerSpec
from baton.core.settings import Settings
from baton.ingest.planners.report import ReportScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.runtime import build_app, prepare_store
from baton.service import mula_import
from baton.storage.engine import Store
from baton.storage.tables import MulaImport, Task
from harness.standins.mula_db import REVISIONS, MulaDatabase, fill_example
from tests.conftest import fresh_postgres_database, postgres_url
from tests.mula_checks import Target, baton_tasks, check_moved, check_openkat_clients, read_mula, run_import, untouched

NOW = datetime.now(UTC).replace(microsecond=0)


def baton(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") or k.startswith("BATON_TEST")}
    environment.pop("SCHEDULER_DB_URI", None)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "baton", *args], env=environment, capture_output=True, text=True, timeout=120
    )


def one_line_error(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("baton: error: "), result.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.fixture(params=REVISIONS)
def revision(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def mula(revision: str) -> Iterator[str]:
    """A stand-in of mula's database at `revision`, filled as mula fills it; its connection string."""
    with fresh_postgres_database("mula") as conninfo:
        fill_example(MulaDatabase(conninfo, revision).create(), NOW)
        yield conninfo


@pytest.fixture(params=["sqlite", "postgresql", "shared"])
def target(request: pytest.FixtureRequest, tmp_path: Path, mula: str) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target(f"sqlite:///{tmp_path / 'baton.db'}")
    elif request.param == "shared":
        yield Target(mula, "baton")
    else:
        postgres_url()
        with fresh_postgres_database("baton") as conninfo:
            yield Target(conninfo)


def fire_report_schedules(store: Store, settings: Settings, organisation: str) -> int:
    context = SchedulerContext(store, settings, "test", "here", source_factory=lambda spec: None)
    scheduler = ReportScheduler(SchedulerSpec(organisation, ReportScheduler.type), context)
    scheduler.setup()
    try:
        return int(scheduler.tick())
    finally:
        scheduler.teardown()


def test_every_row_moves_with_its_id_and_openkats_clients_find_it(mula: str, target: Target) -> None:
    before = untouched(mula)
    report = run_import(mula, target)
    assert report.outcome == "imported"
    assert untouched(mula) == before, "mula's database was written"
    state = read_mula(mula)
    store = target.store()
    try:
        check_moved(state, store)
        assert report.tally["tasks"].read == len(state.tasks)
        assert report.tally["tasks"].added == len(state.kept_tasks())
        settings = target.settings()
        with TestClient(build_app(settings, store)) as client:
            check_openkat_clients(state, client)
            # rocky's report schedule, due at the switch, fires in Baton: a report task linked to it.
            assert fire_report_schedules(store, settings, "beta") == 1
            [fired] = client.post("/schedulers/report/pop").json()["results"]
            schedule_id = next(
                key for key, row in state.schedules.items() if row["type"] == "report" and row["schedule"]
            )
            assert fired["schedule_id"] == str(schedule_id) and fired["data"]["organisation_id"] == "beta"
    finally:
        store.dispose()
    assert untouched(mula) == before


@pytest.mark.parametrize("revision", ["0010"], indirect=True)
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_second_run_adds_and_changes_nothing(mula: str, target: Target) -> None:
    run_import(mula, target)
    store = target.store()
    first = baton_tasks(store)
    again = run_import(mula, target)
    assert again.outcome == "already" and again.recorded is not None and again.recorded.finished_at is not None
    assert baton_tasks(store) == first
    store.dispose()
    env = {"BATON_DATABASE_URL": target.url}
    printed = baton("import-mula", mula, env=env)
    assert printed.returncode == 0, printed.stderr
    assert "Nothing added or changed" in printed.stdout and "mula's state was imported into" in printed.stdout


@pytest.mark.parametrize("revision", ["0010"], indirect=True)
@pytest.mark.parametrize("target", ["sqlite", "shared"], indirect=True)
def test_a_dry_run_reads_and_counts_and_writes_nothing(mula: str, target: Target) -> None:
    before = untouched(mula)
    dry = run_import(mula, target, dry_run=True)
    assert dry.outcome == "dry-run" and not target.written()
    env = {"BATON_DATABASE_URL": target.url, **({"BATON_DATABASE_SCHEMA": target.schema} if target.schema else {})}
    printed = baton("import-mula", "--dry-run", mula, env=env)
    assert printed.returncode == 0 and "Dry run: nothing was written." in printed.stdout, printed.stderr
    assert "a run creates and migrates it first" in printed.stdout or "has no schema yet" in printed.stdout
    assert not target.written()
    assert untouched(mula) == before
    real = run_import(mula, target)
    for kind in ("organisations", "schedules", "tasks", "boefje_runs"):
        assert dry.tally[kind].added == real.tally[kind].added, kind
        assert dry.tally[kind].skipped == real.tally[kind].skipped, kind
    assert dry.tally["tasks"].changed == real.tally["tasks"].changed


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("revision", ["0010"], indirect=True)
@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("UPDATE alembic_version SET version_num = '0007'", "revision 0007, older than import-mula reads"),
        ("UPDATE alembic_version SET version_num = '0011'", "revision 0011, which is not one of mula's"),
        ("DROP TABLE alembic_version", "not mula's database: it has tasks, schedules but no alembic_version"),
        ("ALTER TABLE tasks DROP COLUMN organisation", "tasks has no column organisation"),
        ("DROP TABLE tasks, schedules, alembic_version", "has none of mula's tables"),
    ],
)
def test_a_database_that_is_not_mulas_at_a_revision_it_reads_is_refused_before_anything_is_written(
    mula: str, tmp_path: Path, change: str, said: str
) -> None:
    with psycopg.connect(mula, autocommit=True) as conn:
        conn.execute(change)
    target = Target(f"sqlite:///{tmp_path / 'baton.db'}")
    one_line_error(baton("import-mula", mula, env={"BATON_DATABASE_URL": target.url}), said)
    assert not target.written()
    shared = Target(mula, "baton")
    one_line_error(baton("import-mula", mula, env={"BATON_DATABASE_URL": mula, "BATON_DATABASE_SCHEMA": "baton"}), said)
    assert not shared.written()


def test_an_unreachable_mula_and_batons_own_database_are_refused(tmp_path: Path) -> None:
    target = Target(f"sqlite:///{tmp_path / 'baton.db'}")
    port = closed_port()
    unreachable = baton(
        "import-mula", f"postgresql://postgres@127.0.0.1:{port}/scheduler", env={"BATON_DATABASE_URL": target.url}
    )
    one_line_error(
        unreachable, f"cannot reach mula's database, PostgreSQL at 127.0.0.1:{port}/scheduler", "connection refused"
    )
    assert not target.written()
    with fresh_postgres_database("batons") as conninfo:
        Store(conninfo).migrate()
        one_line_error(
            baton("import-mula", conninfo, env={"BATON_DATABASE_URL": target.url}), "holds Baton's own tables"
        )
        # Where Baton already runs in that schema (the compose overlay with BATON_DATABASE_SCHEMA empty):
        # nothing of mula's there, nothing to import, Baton's tables untouched.
        kept = baton("import-mula", "--if-present", conninfo, env={"BATON_DATABASE_URL": conninfo})
        assert kept.returncode == 0 and "holds Baton's own tables, not mula's: nothing to import" in kept.stdout
    one_line_error(baton("import-mula", "sqlite:///mula.db", env={"BATON_DATABASE_URL": target.url}), "is PostgreSQL")
    assert not target.written()


def test_a_database_without_mulas_tables_is_nothing_to_import_with_if_present(tmp_path: Path) -> None:
    with fresh_postgres_database("empty") as conninfo:
        target = Target(f"sqlite:///{tmp_path / 'baton.db'}")
        plain = baton("import-mula", conninfo, env={"BATON_DATABASE_URL": target.url})
        one_line_error(plain, "has none of mula's tables", "--if-present")
        # What OpenKAT's compose file and packages run at every start: SCHEDULER_DB_URI names mula's database.
        present = baton(
            "import-mula", "--if-present", env={"BATON_DATABASE_URL": target.url, "SCHEDULER_DB_URI": conninfo}
        )
        assert present.returncode == 0 and "nothing to import" in present.stdout, present.stderr
        assert not target.written()


class StopAfter:
    """A progress that stops the run (as a kill would) after `batches` batches of tasks."""

    def __init__(self, batches: int) -> None:
        self.kind, self.left = "", batches

    def begin(self, kind: str, total: int) -> None:
        self.kind = kind

    def advance(self, rows: int) -> None:
        if self.kind == "tasks":
            self.left -= 1
            if self.left < 0:
                raise KeyboardInterrupt

    def end(self) -> None:
        pass


@pytest.mark.parametrize("revision", ["0008"], indirect=True)
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("batches", [2, 7])  # stopped among the tasks not queued; among the queued ones
def test_a_run_stopped_half_way_is_completed_by_the_next(
    mula: str, target: Target, batches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mula_import, "BATCH_ROWS", 2)
    with pytest.raises(KeyboardInterrupt):
        run_import(mula, target, StopAfter(batches))
    store = target.store()
    with store.session() as session:
        record = session.get(MulaImport, 1)
        assert record is not None and record.finished_at is None
        assert 0 < (session.scalar(select(func.count()).select_from(Task)) or 0) < len(read_mula(mula).kept_tasks())
    completed = run_import(mula, target)
    assert completed.outcome == "completed" and completed.tally["tasks"].present > 0
    state = read_mula(mula)
    check_moved(state, store)
    with TestClient(build_app(target.settings(), store)) as client:
        check_openkat_clients(state, client)
    store.dispose()


@pytest.mark.parametrize("revision", ["0010"], indirect=True)
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_an_unfinished_import_is_not_completed_once_baton_has_run(
    mula: str, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mula_import, "BATCH_ROWS", 2)
    with pytest.raises(KeyboardInterrupt):
        run_import(mula, target, StopAfter(7))
    store = target.store()
    with TestClient(build_app(target.settings(), store)) as client:  # Baton started anyway, and handed a task out
        assert client.post("/schedulers/boefje/pop").json()["results"]
    store.dispose()
    env = {"BATON_DATABASE_URL": target.url}
    one_line_error(baton("import-mula", mula, env=env), "did not finish, and Baton has run since (a task changed at")


@pytest.mark.parametrize("revision", ["0010"], indirect=True)
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_run_after_baton_has_served_never_brings_back_or_overwrites_a_task(mula: str, target: Target) -> None:
    run_import(mula, target)
    store = target.store()
    with TestClient(build_app(target.settings(), store)) as client:
        [popped] = client.post("/schedulers/boefje/pop").json()["results"]
        assert client.patch(f"/tasks/{popped['id']}", json={"status": "completed"}).status_code == 200
    gone = next(iter(baton_tasks(store)))
    with store.session() as session:  # what retention does to a finished task
        session.execute(update(Task).where(Task.id == gone).values(status="completed"))
        session.query(Task).filter(Task.id == gone).delete()
    served = baton_tasks(store)
    assert run_import(mula, target).outcome == "already"
    assert baton_tasks(store) == served
    store.dispose()


@pytest.mark.parametrize("revision", ["0010"], indirect=True)
@pytest.mark.parametrize("target", ["sqlite", "shared"], indirect=True)
def test_a_first_import_refuses_a_baton_database_with_tasks_of_its_own(mula: str, target: Target) -> None:
    store = prepare_store(target.settings())
    with TestClient(build_app(target.settings(), store)) as client:
        client.post("/organisations", json={"id": "zeta", "name": "Zeta"}).raise_for_status()
        pushed = client.post("/queues/boefje-zeta/push", json={"priority": 3, "data": {"x": 1}, "hash": "h"})
        assert pushed.status_code == 201, pushed.text
    store.dispose()
    env = {"BATON_DATABASE_URL": target.url, **({"BATON_DATABASE_SCHEMA": target.schema} if target.schema else {})}
    one_line_error(baton("import-mula", mula, env=env), "holds 1 tasks and 0 schedules of its own")


@pytest.mark.parametrize("revision", ["0009"], indirect=True)
def test_migrate_refuses_a_schema_holding_mulas_tables_and_says_what_to_do(mula: str) -> None:
    refused = baton("migrate", env={"BATON_DATABASE_URL": mula})
    one_line_error(
        refused,
        "schema public of PostgreSQL at",
        "holds the tables of OpenKAT's scheduler, mula (alembic revision 0009)",
        "set BATON_DATABASE_SCHEMA",
        "baton import-mula",
    )
    with psycopg.connect(mula) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0009",)
    done = baton("migrate", env={"BATON_DATABASE_URL": mula, "BATON_DATABASE_SCHEMA": "baton"})
    assert done.returncode == 0 and "(schema baton) is up to date" in done.stdout, done.stderr


def test_the_summary_names_each_kind_and_why_rows_were_left_out(tmp_path: Path) -> None:
    with fresh_postgres_database("mula") as conninfo:
        fill_example(MulaDatabase(conninfo, "0010").create(), NOW)
        printed = baton("import-mula", conninfo, env={"BATON_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}"})
    assert printed.returncode == 0, printed.stderr
    out = printed.stdout
    assert "alembic revision 0010 (OpenKAT v1.19, v1.20)" in out
    for line in ("organisations", "schedules", "tasks", "boefje runs"):
        assert any(row.startswith(line) for row in out.splitlines()), line
    assert "tasks: 1 pending -> cancelled" in out and "tasks: 1 queued duplicate -> cancelled" in out
    assert "tasks: 1 skipped: organisation code Baton cannot hold" in out
    assert "Import finished and recorded" in out
    assert "importing" in printed.stderr  # not a terminal: plain log lines, no progress bar


def test_ids_survive_as_mula_made_them() -> None:
    """A sanity check of the stand-in itself: a boefje job's `data.id` is its task's id, as in mula."""
    with fresh_postgres_database("mula") as conninfo:
        ids = fill_example(MulaDatabase(conninfo, "0010").create(), NOW - timedelta(days=1))
        state = read_mula(conninfo)
    row = state.tasks[ids["queued 1"]]
    assert uuid.UUID(row["data"]["id"]) == row["id"] and row["status"] == "QUEUED"
