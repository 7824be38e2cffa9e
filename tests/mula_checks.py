"""Checks of `baton import-mula` that hold for any mula database, the stand-in's (harness/standins/mula_db.py)
and one mula built and filled itself (tests/integration/test_mula_import_real.py): mula's rows read here
directly, with this file's own reading of mula's rules (not Baton's code), compared with what Baton holds
and answers OpenKAT's clients afterwards."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from fastapi.testclient import TestClient
from sqlalchemy import Text, cast, select

from baton.core.settings import Settings
from baton.runtime import prepare_store
from baton.service import mula_import
from baton.service.mula_import import ImportReport, TargetSpec
from baton.storage.engine import Store
from baton.storage.tables import BoefjeRun, Organisation, Schedule, Task
from tests.openkat_models import RockyTask, ScheduleResponse, runner_task

CODE = re.compile(r"^[-\w][-.\w]*$")
STATUSES = {"PENDING": "cancelled"}  # every other status keeps its (lower-case) name


@dataclass
class MulaState:
    """mula's rows as its database holds them (status upper-case, data as PostgreSQL prints the jsonb)."""

    revision: str
    tasks: dict[uuid.UUID, dict[str, Any]]
    schedules: dict[uuid.UUID, dict[str, Any]]

    def organisations(self) -> set[str]:
        named = {row["org"] for row in [*self.tasks.values(), *self.schedules.values()]}
        return {code for code in named if code and len(code) <= 64 and CODE.match(code)}

    def kept_tasks(self) -> dict[uuid.UUID, dict[str, Any]]:
        codes = self.organisations()
        return {task_id: row for task_id, row in self.tasks.items() if row["org"] in codes}

    def pop_order(self, kind: str) -> list[uuid.UUID]:
        """mula's order of its queued tasks of one type (priority, NULL last, then created_at), the
        copies of a job queued twice in one queue left out."""
        queued = [row for row in self.kept_tasks().values() if row["status"] == "QUEUED" and row["type"] == kind]
        queued.sort(key=lambda row: (row["priority"] is None, row["priority"] or 0, row["created_at"], row["id"]))
        seen: set[tuple[str, str]] = set()
        order = []
        for row in queued:
            if row["hash"] is not None and (row["org"], row["hash"]) in seen:
                continue
            if row["hash"] is not None:
                seen.add((row["org"], row["hash"]))
            order.append(row["id"])
        return order

    def duplicates(self) -> set[uuid.UUID]:
        kept = {task_id for kind in ("boefje", "normalizer", "report") for task_id in self.pop_order(kind)}
        return {
            task_id for task_id, row in self.kept_tasks().items() if row["status"] == "QUEUED" and task_id not in kept
        }


def organisation_at_0008(kind: str | None, data: dict[str, Any], scheduler_id: str, schedule: bool) -> str | None:
    """What mula's migration 0009 writes into `organisation` (else the per-organisation scheduler id's tail)."""
    boefje_meta = (data.get("raw_data") or {}).get("boefje_meta") or {}
    if schedule:
        found = data.get("organisation_id") or boefje_meta.get("organization") or data.get("organization")
    else:
        found = {
            "boefje": data.get("organization"),
            "normalizer": boefje_meta.get("organization"),
            "report": data.get("organisation_id"),
        }.get(kind or "")
    if found:
        return str(found)
    head, _, tail = scheduler_id.partition("-")
    return tail if head in ("boefje", "normalizer", "report") and tail else None


def read_mula(conninfo: str) -> MulaState:
    with psycopg.connect(conninfo) as conn:
        [(revision,)] = conn.execute("SELECT version_num FROM public.alembic_version").fetchall()
        with_org = revision >= "0009"
        organisation = ", organisation" if with_org else ""
        tasks = {}
        for row in conn.execute(
            "SELECT id, scheduler_id, type, status::text, priority, hash, schedule_id, data::text, data, created_at, "
            f"modified_at{organisation} FROM public.tasks"
        ):
            task_id, scheduler_id, kind, status, priority, task_hash, schedule_id, text, data, created, modified = row[
                :11
            ]
            org = row[11] if with_org else organisation_at_0008(kind, data, scheduler_id, schedule=False)
            tasks[task_id] = {
                "id": task_id,
                "scheduler_id": scheduler_id,
                "type": kind,
                "status": status,
                "priority": priority,
                "hash": task_hash,
                "schedule_id": schedule_id,
                "text": text,
                "created_at": created,
                "modified_at": modified,
                "org": org,
                "data": data,
            }
        schedules = {}
        for row in conn.execute(
            "SELECT id, scheduler_id, hash, data::text, data, enabled, schedule, deadline_at, created_at, modified_at"
            f"{organisation} FROM public.schedules"
        ):
            schedule_id, scheduler_id, schedule_hash, text, data, enabled, cron, deadline, created, modified = row[:10]
            org = row[10] if with_org else organisation_at_0008(None, data, scheduler_id, schedule=True)
            schedules[schedule_id] = {
                "id": schedule_id,
                "type": scheduler_id.partition("-")[0],
                "hash": schedule_hash,
                "text": text,
                "enabled": enabled,
                "schedule": cron,
                "deadline_at": deadline,
                "created_at": created,
                "modified_at": modified,
                "org": org,
            }
    return MulaState(revision, tasks, schedules)


def untouched(conninfo: str) -> tuple[dict[str, tuple[int, int, int]], str]:
    """What shows a write to mula's tables: the counters of rows inserted, updated and deleted per table
    (pg_stat_user_tables, statistics flushed first), and a checksum of every row."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT to_regproc('pg_stat_force_next_flush') IS NOT NULL").fetchone() == (True,):
            conn.execute("SELECT pg_stat_force_next_flush()")  # PostgreSQL 15 on
        conn.execute("SELECT pg_stat_clear_snapshot()")
        counters = {
            name: (ins, upd, dele)
            for name, ins, upd, dele in conn.execute(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = 'public'"
            )
        }
        digest = hashlib.sha256()
        for table in ("alembic_version", "schedules", "tasks"):
            for (text,) in conn.execute(f"SELECT t::text FROM public.{table} AS t ORDER BY t::text"):
                digest.update(text.encode())
    return counters, digest.hexdigest()


def baton_tasks(store: Store) -> dict[uuid.UUID, dict[str, Any]]:
    with store.session() as session:
        rows = session.execute(
            select(
                Task.id,
                Task.seq,
                Task.scheduler_id,
                Task.schedule_id,
                Task.organisation,
                Task.type,
                Task.priority,
                Task.status,
                Task.hash,
                cast(Task.data, Text).label("text"),
                Task.reason,
                Task.fair_key,
                Task.created_at,
                Task.modified_at,
            )
        ).all()
    return {row.id: row._asdict() for row in rows}


def baton_schedules(store: Store) -> dict[uuid.UUID, dict[str, Any]]:
    with store.session() as session:
        rows = session.execute(
            select(
                Schedule.id,
                Schedule.scheduler_id,
                Schedule.organisation,
                Schedule.hash,
                cast(Schedule.data, Text).label("text"),
                Schedule.enabled,
                Schedule.schedule,
                Schedule.deadline_at,
                Schedule.created_at,
                Schedule.modified_at,
            )
        ).all()
    return {row.id: row._asdict() for row in rows}


def check_moved(mula: MulaState, store: Store) -> None:
    """Every row mula holds that Baton can hold is in Baton under its id, every field as mula had it."""
    tasks = baton_tasks(store)
    kept = mula.kept_tasks()
    assert set(tasks) == set(kept), "tasks missing or extra"
    duplicates = mula.duplicates()
    for task_id, row in kept.items():
        got = tasks[task_id]
        status = "cancelled" if task_id in duplicates else STATUSES.get(row["status"], row["status"].lower())
        assert got["status"] == status, (row, got)
        assert got["scheduler_id"] == f"{row['type']}-{row['org']}" and got["organisation"] == row["org"]
        assert got["type"] == row["type"] and got["hash"] == row["hash"]
        assert got["priority"] == (2**31 - 1 if row["priority"] is None else row["priority"])
        assert got["schedule_id"] == (None if row["schedule_id"] is None else str(row["schedule_id"]))
        assert got["text"] == row["text"], "data must be kept byte for byte"
        assert (got["created_at"], got["modified_at"]) == (row["created_at"], row["modified_at"])
        assert got["fair_key"] == 0
        if row["status"] == "PENDING" or task_id in duplicates:
            assert got["reason"] and "mula" in got["reason"]
    schedules = baton_schedules(store)
    codes = mula.organisations()
    kept_schedules = {key: row for key, row in mula.schedules.items() if row["org"] in codes}
    assert set(schedules) == set(kept_schedules)
    for schedule_id, row in kept_schedules.items():
        got = schedules[schedule_id]
        assert (got["scheduler_id"], got["organisation"], got["hash"]) == (row["type"], row["org"], row["hash"])
        assert got["text"] == row["text"]
        assert (got["enabled"], got["schedule"]) == (row["enabled"], row["schedule"])
        assert got["deadline_at"] == row["deadline_at"]
        assert (got["created_at"], got["modified_at"]) == (row["created_at"], row["modified_at"])
    with store.session() as session:
        organisations = {org: source for org, source in session.execute(select(Organisation.id, Organisation.source))}
        runs = {
            (org, boefje, obj): when
            for org, boefje, obj, when in session.execute(
                select(BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key, BoefjeRun.queued_at)
            )
        }
    assert organisations == dict.fromkeys(codes, "katalogus")
    assert runs == expected_runs(mula)


def expected_runs(mula: MulaState) -> dict[tuple[str, str, str], datetime]:
    """Per (organisation, boefje, object): the modified_at of the latest boefje task of its hash."""
    latest: dict[str, dict[str, Any]] = {}
    for row in mula.kept_tasks().values():
        if row["type"] != "boefje" or row["hash"] is None:
            continue
        if row["hash"] not in latest or row["created_at"] > latest[row["hash"]]["created_at"]:
            latest[row["hash"]] = row
    runs: dict[tuple[str, str, str], datetime] = {}
    for row in latest.values():
        boefje, ooi = (row["data"].get("boefje") or {}).get("id"), row["data"].get("input_ooi")
        if boefje and ooi:
            key = (row["org"], boefje, ooi)
            runs[key] = max(row["modified_at"], runs.get(key, row["modified_at"]))
    return runs


def queued_per_queue(mula: MulaState) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for kind in ("boefje", "normalizer", "report"):
        for task_id in mula.pop_order(kind):
            row = mula.tasks[task_id]
            counts[f"{kind}-{row['org']}"] += 1
    return dict(counts)


def in_flight_per_queue(mula: MulaState) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for row in mula.kept_tasks().values():
        if row["status"] in ("DISPATCHED", "RUNNING"):
            counts[f"{row['type']}-{row['org']}"] += 1
    return dict(counts)


def check_openkat_clients(mula: MulaState, client: TestClient) -> None:
    """OpenKAT's web UI and runners after the switch: every task and schedule under its id, the queues'
    counts, in-flight tasks finished by their runners, and every queued task popped once, in mula's order."""
    queues = {queue["id"]: queue for queue in client.get("/queues", params={"limit": 1000}).json()}
    for queue_id, queue in queues.items():
        assert queue["size"] == queued_per_queue(mula).get(queue_id, 0), queue
        assert queue["in_flight"] == in_flight_per_queue(mula).get(queue_id, 0), queue
    kept = mula.kept_tasks()
    for task_id, row in kept.items():
        answer = client.get(f"/tasks/{task_id}")
        assert answer.status_code == 200, answer.text
        task = RockyTask.model_validate(answer.json())
        assert (task.scheduler_id, task.organisation, task.type, task.hash) == (
            row["type"],
            row["org"],
            row["type"],
            row["hash"],
        )
        assert task.created_at == row["created_at"] and task.modified_at == row["modified_at"]
        assert answer.json()["data"] == row["data"]
        if row["type"] in ("boefje", "normalizer") and row["status"] in ("QUEUED", "DISPATCHED", "RUNNING"):
            runner_task(answer.json())  # what a runner reads of a task it holds
    codes = mula.organisations()
    for schedule_id, row in mula.schedules.items():
        answer = client.get(f"/schedules/{schedule_id}")
        if row["org"] not in codes:
            assert answer.status_code == 404
            continue
        schedule = ScheduleResponse.model_validate(answer.json())
        assert (schedule.scheduler_id, schedule.organisation, schedule.enabled) == (
            row["type"],
            row["org"],
            row["enabled"],
        )
    for task_id, row in kept.items():  # the runners that held tasks at the switch report on them
        if row["status"] in ("DISPATCHED", "RUNNING"):
            patched = client.patch(f"/tasks/{task_id}", json={"status": "completed"})
            assert patched.status_code == 200, patched.text
            assert patched.json()["status"] == "completed"
    for kind in ("boefje", "normalizer", "report"):
        popped = []
        while results := client.post(f"/schedulers/{kind}/pop").json()["results"]:
            assert len(results) == 1
            popped.append(uuid.UUID(results[0]["id"]))
        assert popped == mula.pop_order(kind), kind


# -- running the import -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Baton's database: BATON_DATABASE_URL and BATON_DATABASE_SCHEMA."""

    url: str
    schema: str | None = None

    def settings(self) -> Settings:
        return Settings(database_url=self.url, database_schema=self.schema)

    def store(self) -> Store:
        return Store(self.settings().database_url, self.schema)

    def written(self) -> bool:
        """Whether anything of Baton's is there: the SQLite file, or the schema / alembic's table."""
        if self.url.startswith("sqlite"):
            return Path(self.url.removeprefix("sqlite:///")).exists()
        schema = self.schema or "public"
        with psycopg.connect(self.url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s "
                "AND tablename IN ('organisations', 'mula_imports')",
                [schema],
            ).fetchone()
        return bool(found and found[0])


class Quiet:
    def begin(self, kind: str, total: int) -> None:
        pass

    def advance(self, rows: int) -> None:
        pass

    def end(self) -> None:
        pass


def run_import(mula_url: str, target: Target, progress: Any = None, **options: Any) -> ImportReport:
    settings = target.settings()
    return mula_import.import_mula(
        mula_url,
        TargetSpec(settings.database_url, settings.database_schema, settings.queue_maxsize),
        prepare=lambda: prepare_store(settings),
        progress=progress or Quiet(),
        **options,
    )
