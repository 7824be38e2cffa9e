"""A stand-in for mula's database (OpenKAT's scheduler): its schema at alembic revision 0008, 0009 or 0010,
written from reading mula's models and migrations (mula/scheduler/models, .../storage/migrations in
nl-kat-coordination), and rows as mula's stores write them. For `baton import-mula`'s tests and benchmark,
where OpenKAT's own code cannot run.

What mula's schema is at each revision (tests/integration/test_mula_import_real.py compares this with
one built by mula's own migrations):

- `tasks`: id uuid, scheduler_id varchar, status `taskstatus` (an enum of the upper-case names, in
  mula's order), created_at/modified_at timestamptz default now(), type varchar, schedule_id uuid
  (-> schedules ON DELETE SET NULL), hash varchar(32) (index ix_tasks_hash), priority integer (NULL in
  rows older than 0008), data jsonb; 0009 adds organisation varchar NOT NULL; 0010 the partial index
  ix_tasks_status_queued (scheduler_id, status) WHERE status = 'QUEUED'.
- `schedules`: id uuid, scheduler_id varchar, hash varchar(32) UNIQUE, data jsonb, enabled boolean,
  schedule varchar (cron), deadline_at, created_at, modified_at timestamptz; 0009 adds organisation.
- `alembic_version`: version_num varchar(32), primary key alembic_version_pkc.

How mula writes rows: a scheduler id per organisation and type (`boefje-acme`) up to v1.18 (0008), the
type alone (`boefje`) from v1.19 (rows of an upgraded database keep their old ids); statuses upper-case;
`data` its job's `model_dump()` through `json.dumps(default=str)` (UUIDs and times as strings, times as
`2026-01-31 10:00:00+00:00`); hashes MurmurHash3 x64 128 of mula's strings.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import mmh3
import psycopg

REVISIONS = ("0008", "0009", "0010")
STATUSES = ("PENDING", "QUEUED", "DISPATCHED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")


def schema_statements(revision: str) -> list[str]:
    """The DDL of mula's schema at `revision`, in the connection's current schema."""
    if revision not in REVISIONS:
        raise ValueError(f"no stand-in for mula's revision {revision}")
    organisation = revision >= "0009"
    labels = ", ".join(f"'{status}'" for status in STATUSES)
    statements = [
        f"CREATE TYPE taskstatus AS ENUM ({labels})",
        """CREATE TABLE schedules (
            id uuid NOT NULL,
            scheduler_id character varying NOT NULL,
            hash character varying(32),
            data jsonb NOT NULL,
            enabled boolean NOT NULL,
            schedule character varying,
            deadline_at timestamp with time zone,
            created_at timestamp with time zone DEFAULT now() NOT NULL,
            modified_at timestamp with time zone DEFAULT now() NOT NULL,
            CONSTRAINT schedules_pkey PRIMARY KEY (id),
            CONSTRAINT schedules_hash_key UNIQUE (hash)
        )""",
        """CREATE TABLE tasks (
            id uuid NOT NULL,
            scheduler_id character varying NOT NULL,
            status taskstatus NOT NULL,
            created_at timestamp with time zone DEFAULT now() NOT NULL,
            modified_at timestamp with time zone DEFAULT now() NOT NULL,
            type character varying NOT NULL,
            schedule_id uuid,
            hash character varying(32),
            priority integer,
            data jsonb NOT NULL,
            CONSTRAINT tasks_pkey PRIMARY KEY (id),
            CONSTRAINT tasks_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES schedules(id) ON DELETE SET NULL
        )""",
        "CREATE INDEX ix_tasks_hash ON tasks USING btree (hash)",
        """CREATE TABLE alembic_version (
            version_num character varying(32) NOT NULL,
            CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
        )""",
        f"INSERT INTO alembic_version (version_num) VALUES ('{revision}')",
    ]
    if organisation:
        statements += [
            "ALTER TABLE schedules ADD COLUMN organisation character varying NOT NULL",
            "ALTER TABLE tasks ADD COLUMN organisation character varying NOT NULL",
        ]
    if revision >= "0010":
        statements.append(
            "CREATE INDEX ix_tasks_status_queued ON tasks USING btree (scheduler_id, status) "
            "WHERE status = 'QUEUED'::taskstatus"
        )
    return statements


# -- jobs, as mula's models dump them ----------------------------------------------------------------


def mula_hash(text: str) -> str:
    return bytes(mmh3.hash_bytes(text)).hex()


def boefje_job(
    task_id: uuid.UUID,
    boefje_id: str,
    input_ooi: str | None,
    organisation: str,
    *,
    version: str | None = None,
    oci_image: str | None = None,
    deduplication_key: uuid.UUID | None = None,
) -> dict[str, Any]:
    return {
        "id": task_id,
        "boefje": {
            "id": boefje_id,
            "name": boefje_id.replace("-", " ").title(),
            "version": version,
            "oci_image": oci_image,
        },
        "input_ooi": input_ooi,
        "organization": organisation,
        "deduplication_key": deduplication_key,
        "dispatches": [],
    }


def boefje_hash(job: dict[str, Any]) -> str:
    if job["input_ooi"]:
        return mula_hash(f"{job['input_ooi']}-{job['boefje']['id']}-{job['organization']}")
    return mula_hash(f"{job['boefje']['id']}-{job['organization']}")


def normalizer_job(
    task_id: uuid.UUID, normalizer_id: str, boefje_id: str, input_ooi: str, organisation: str, ended_at: datetime
) -> dict[str, Any]:
    return {
        "id": task_id,
        "normalizer": {"id": normalizer_id, "name": None, "version": None},
        "raw_data": {
            "id": uuid.uuid4(),
            "boefje_meta": {
                "id": uuid.uuid4(),
                "boefje": {"id": boefje_id, "name": None, "version": None, "oci_image": None},
                "input_ooi": input_ooi,
                "arguments": {},
                "organization": organisation,
                "started_at": ended_at - timedelta(seconds=3),
                "ended_at": ended_at,
            },
            "mime_types": [{"value": f"boefje/{boefje_id}"}, {"value": "application/json"}],
            "secure_hash": "sha512:0f1e",
            "hash_retrieval_link": None,
        },
    }


def normalizer_hash(job: dict[str, Any]) -> str:
    meta = job["raw_data"]["boefje_meta"]
    return mula_hash(f"{job['normalizer']['id']}-{meta['id']}-{meta['organization']}")


def report_job(organisation: str, recipe: str) -> dict[str, Any]:
    return {"organisation_id": organisation, "report_recipe_id": recipe}


def report_hash(job: dict[str, Any]) -> str:
    return mula_hash(f"{job['report_recipe_id']}-{job['organisation_id']}")


def as_stored(data: dict[str, Any]) -> str:
    """`data` as mula's engine serialises it (`json.dumps(default=str)`) before PostgreSQL makes it jsonb."""
    return json.dumps(data, default=str)


# -- the database ------------------------------------------------------------------------------------


@dataclass
class MulaDatabase:
    """A mula database at `revision`, written as mula writes it. `conninfo`: libpq connection string."""

    conninfo: str
    revision: str
    written: list[uuid.UUID] = field(default_factory=list)

    def create(self) -> MulaDatabase:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            for statement in schema_statements(self.revision):
                conn.execute(statement)
        return self

    def scheduler_id(self, kind: str, organisation: str, *, upgraded: bool = False) -> str:
        """The id mula gave a row: per organisation up to 0008 (and in rows an upgrade kept: `upgraded`)."""
        return f"{kind}-{organisation}" if self.revision == "0008" or upgraded else kind

    def schedule(
        self,
        kind: str,
        organisation: str,
        data: dict[str, Any],
        schedule_hash: str | None,
        *,
        enabled: bool = True,
        cron: str | None = None,
        deadline_at: datetime | None = None,
        created_at: datetime | None = None,
        upgraded: bool = False,
    ) -> uuid.UUID:
        schedule_id = uuid.uuid4()
        created = created_at or datetime.now(UTC)
        columns = [
            "id",
            "scheduler_id",
            "hash",
            "data",
            "enabled",
            "schedule",
            "deadline_at",
            "created_at",
            "modified_at",
        ]
        values: list[Any] = [
            schedule_id,
            self.scheduler_id(kind, organisation, upgraded=upgraded),
            schedule_hash,
            as_stored(data),
            enabled,
            cron,
            deadline_at,
            created,
            created,
        ]
        self._insert("schedules", columns, values, organisation)
        return schedule_id

    def task(
        self,
        kind: str,
        organisation: str,
        data: dict[str, Any],
        task_hash: str | None,
        status: str,
        priority: int | None,
        *,
        task_id: uuid.UUID | None = None,
        schedule_id: uuid.UUID | None = None,
        created_at: datetime | None = None,
        modified_at: datetime | None = None,
        upgraded: bool = False,
    ) -> uuid.UUID:
        task_id = task_id or uuid.uuid4()
        created = created_at or datetime.now(UTC)
        columns = [
            "id",
            "scheduler_id",
            "status",
            "created_at",
            "modified_at",
            "type",
            "schedule_id",
            "hash",
            "priority",
            "data",
        ]
        values: list[Any] = [
            task_id,
            self.scheduler_id(kind, organisation, upgraded=upgraded),
            status.upper(),
            created,
            modified_at or created,
            kind,
            schedule_id,
            task_hash,
            priority,
            as_stored(data),
        ]
        self._insert("tasks", columns, values, organisation)
        self.written.append(task_id)
        return task_id

    def _insert(self, table: str, columns: list[str], values: list[Any], organisation: str) -> None:
        if self.revision >= "0009":
            columns, values = [*columns, "organisation"], [*values, organisation]
        casts = {"data": "%s::jsonb", "status": "%s::taskstatus"}
        placeholders = ", ".join(casts.get(column, "%s") for column in columns)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})", values)

    def bulk(self, organisations: int, schedules: int, tasks: int, queued: int) -> None:
        """Many rows at once, in SQL (for the benchmark): `schedules` boefje jobs spread over `organisations`
        (`org-0001`, ...), each with its schedule, and `tasks` boefje tasks running those jobs again and again
        (task n runs job n % schedules), each with its own creation time and, as mula's boefje scheduler
        gives, its epoch seconds as priority; the last `queued` tasks queued (at most one per job, as mula
        keeps it), the others completed."""
        assert queued <= schedules <= tasks
        job_of = f"(n % {schedules})"
        organisation = f"'org-' || lpad(((({job_of}) % {organisations}) + 1)::text, 4, '0')"
        scheduler = f"'boefje-' || {organisation}" if self.revision == "0008" else "'boefje'"
        ooi = f"'Hostname|internet|host-' || {job_of} || '.example.com'"
        job = (
            f"jsonb_build_object('id', id, 'boefje', jsonb_build_object('id', 'dns-records', 'name', 'DNS records', "
            f"'version', null, 'oci_image', 'ghcr.io/minvws/openkat/dns-records:latest'), 'input_ooi', {ooi}, "
            f"'organization', {organisation}, 'deduplication_key', null, 'dispatches', '[]'::jsonb)"
        )
        with_org = self.revision >= "0009"
        org_column, org_value = (", organisation", f", {organisation}") if with_org else ("", "")
        schedule_columns = "id, scheduler_id, hash, data, enabled, schedule, deadline_at, created_at, modified_at"
        task_columns = "id, scheduler_id, status, created_at, modified_at, type, schedule_id, hash, priority, data"
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(
                f"""INSERT INTO schedules ({schedule_columns}{org_column})
                SELECT id, {scheduler}, md5('job' || {job_of}), {job}, true, NULL,
                       now() + (n % 86400) * interval '1 second', created, created{org_value}
                FROM (SELECT n, gen_random_uuid() AS id, now() - interval '30 days' + n * interval '1 second' AS created
                      FROM generate_series(0, {schedules - 1}) AS n) AS made"""
            )
            conn.execute(
                f"""INSERT INTO tasks ({task_columns}{org_column})
                SELECT id, {scheduler},
                       (CASE WHEN n >= {tasks - queued} THEN 'QUEUED' ELSE 'COMPLETED' END)::taskstatus,
                       created, created + interval '5 minutes', 'boefje', NULL, md5('job' || {job_of}),
                       extract(epoch FROM created)::integer, {job}{org_value}
                FROM (SELECT n, gen_random_uuid() AS id, now() - interval '20 days' + n * interval '1 second' AS created
                      FROM generate_series(0, {tasks - 1}) AS n) AS made"""
            )
            conn.execute("ANALYZE schedules")
            conn.execute("ANALYZE tasks")


def fill_example(db: MulaDatabase, now: datetime | None = None) -> dict[str, uuid.UUID]:
    """Rows of every kind mula writes, and the odd ones an import must handle; the ids of the notable ones.

    Organisations `acme`, `beta`, `ωmega` (OpenKAT's codes are Unicode slugs) and `bad org` (a code Baton
    cannot hold: its rows are left out). Boefje schedules (one disabled, one with the plugin's cron), a
    normalizer schedule (as mula's migration 0008 made them), report schedules (a cron one that is due, a
    one-off one); tasks in every status, a manual run (priority 1), a queued task mula queued twice, a
    pending one, one without a priority (older than 0008), normalizer and report tasks; from 0009 on a
    row an upgrade kept with its per-organisation scheduler id."""
    now = now or datetime.now(UTC)
    ids: dict[str, uuid.UUID] = {}
    day = timedelta(days=1)

    def boefje(
        name: str,
        organisation: str,
        status: str,
        priority: int | None,
        created: datetime,
        *,
        boefje_id: str = "dns-records",
        ooi: str | None = "Hostname|internet|example.com",
        schedule: uuid.UUID | None = None,
        modified: datetime | None = None,
        upgraded: bool = False,
    ) -> uuid.UUID:
        task_id = uuid.uuid4()
        job = boefje_job(
            task_id, boefje_id, ooi, organisation, version="1.2", oci_image="ghcr.io/minvws/openkat/dns:1.2"
        )
        ids[name] = db.task(
            "boefje",
            organisation,
            job,
            boefje_hash(job),
            status,
            priority,
            task_id=task_id,
            schedule_id=schedule,
            created_at=created,
            modified_at=modified,
            upgraded=upgraded,
        )
        return ids[name]

    # Boefje schedules and their tasks.
    dns_job = boefje_job(uuid.uuid4(), "dns-records", "Hostname|internet|example.com", "acme", version="1.2")
    ids["dns schedule"] = db.schedule(
        "boefje", "acme", dns_job, boefje_hash(dns_job), deadline_at=now + day, created_at=now - 10 * day
    )
    boefje(
        "completed",
        "acme",
        "completed",
        int((now - 3 * day).timestamp()),
        now - 3 * day,
        schedule=ids["dns schedule"],
        modified=now - 3 * day + timedelta(minutes=2),
    )
    boefje(
        "latest",
        "acme",
        "completed",
        int((now - 2 * day).timestamp()),
        now - 2 * day,
        schedule=ids["dns schedule"],
        modified=now - 2 * day + timedelta(minutes=5),
    )
    ports_job = boefje_job(uuid.uuid4(), "nmap-ports", "IPAddressV4|internet|192.0.2.1", "acme")
    ids["disabled schedule"] = db.schedule(
        "boefje",
        "acme",
        ports_job,
        boefje_hash(ports_job),
        enabled=False,
        deadline_at=now - day,
        created_at=now - 9 * day,
    )
    cron_job = boefje_job(uuid.uuid4(), "ssl-certificates", "Website|internet|example.com", "beta")
    ids["cron schedule"] = db.schedule(
        "boefje",
        "beta",
        cron_job,
        boefje_hash(cron_job),
        cron="0 3 * * *",
        deadline_at=now + day / 2,
        created_at=now - 8 * day,
    )
    boefje(
        "failed",
        "beta",
        "failed",
        int((now - day).timestamp()),
        now - day,
        boefje_id="ssl-certificates",
        ooi="Website|internet|example.com",
        schedule=ids["cron schedule"],
    )
    boefje(
        "cancelled",
        "beta",
        "cancelled",
        int((now - day).timestamp()),
        now - day + timedelta(seconds=1),
        boefje_id="nmap-ports",
        ooi="IPAddressV4|internet|192.0.2.9",
    )

    # In flight: handed out before the switch; their runners report after it.
    boefje(
        "dispatched",
        "acme",
        "dispatched",
        int((now - timedelta(hours=1)).timestamp()),
        now - timedelta(hours=1),
        boefje_id="nmap-ports",
        ooi="IPAddressV4|internet|192.0.2.1",
    )
    boefje(
        "running",
        "beta",
        "running",
        int((now - timedelta(minutes=30)).timestamp()),
        now - timedelta(minutes=30),
        boefje_id="dns-records",
        ooi="Hostname|internet|beta.example",
    )

    # Queued, across organisations, in an order of their own: mula pops priority, then created_at.
    base = now - timedelta(hours=5)
    boefje("queued 3", "acme", "queued", 1700000300, base + timedelta(minutes=3), ooi="Hostname|internet|a3.example")
    boefje("queued 1", "beta", "queued", 1700000100, base + timedelta(minutes=1), ooi="Hostname|internet|b1.example")
    boefje("queued 4", "ωmega", "queued", 1700000300, base + timedelta(minutes=4), ooi="Hostname|internet|w4.example")
    boefje("queued 2", "acme", "queued", 1700000200, base + timedelta(minutes=2), ooi="Hostname|internet|a2.example")
    boefje("manual run", "ωmega", "queued", 1, base + timedelta(minutes=9), ooi="Hostname|internet|manual.example")
    # mula queued this job twice (its own pop hands out the earlier one first): the later one is cancelled.
    twice = boefje_job(uuid.uuid4(), "dns-records", "Hostname|internet|twice.example", "acme")
    first = uuid.uuid4()
    twice_first = {**twice, "id": first}
    ids["twice first"] = db.task(
        "boefje",
        "acme",
        twice_first,
        boefje_hash(twice),
        "queued",
        1700000400,
        task_id=first,
        created_at=base + timedelta(minutes=5),
    )
    again = uuid.uuid4()
    ids["twice again"] = db.task(
        "boefje",
        "acme",
        {**twice, "id": again},
        boefje_hash(twice),
        "queued",
        1700000400,
        task_id=again,
        created_at=base + timedelta(minutes=6),
    )
    boefje("no priority", "beta", "queued", None, base - timedelta(days=40), ooi="Hostname|internet|old.example")
    boefje(
        "pending", "acme", "pending", 1700000500, base + timedelta(minutes=7), ooi="Hostname|internet|pending.example"
    )
    boefje("no input", "acme", "completed", 1700000000, now - 4 * day, boefje_id="kat-finding-types", ooi=None)
    boefje("bad organisation", "bad org", "queued", 1700000000, base, ooi="Hostname|internet|bad.example")
    if db.revision >= "0009":
        boefje(
            "upgraded",
            "acme",
            "completed",
            1690000000,
            now - 30 * day,
            ooi="Hostname|internet|upgraded.example",
            upgraded=True,
        )

    # Normalizers: mula makes no schedules for them, but its migration 0008 made one per job it found.
    norm_id = uuid.uuid4()
    norm = normalizer_job(
        norm_id, "kat_dns_normalize", "dns-records", "Hostname|internet|example.com", "acme", now - day
    )
    ids["normalizer queued"] = db.task(
        "normalizer",
        "acme",
        norm,
        normalizer_hash(norm),
        "queued",
        int((now - day).timestamp()),
        task_id=norm_id,
        created_at=now - day,
    )
    done_id = uuid.uuid4()
    done = normalizer_job(
        done_id, "kat_dns_normalize", "dns-records", "Hostname|internet|example.com", "beta", now - 2 * day
    )
    ids["normalizer completed"] = db.task(
        "normalizer",
        "beta",
        done,
        normalizer_hash(done),
        "completed",
        int((now - 2 * day).timestamp()),
        task_id=done_id,
        created_at=now - 2 * day,
    )
    ids["normalizer schedule"] = db.schedule(
        "normalizer",
        "beta",
        done,
        normalizer_hash(done),
        cron="0 0 * * *",
        deadline_at=now + day,
        created_at=now - 2 * day,
    )

    # Reports: rocky's schedules; a due cron one fires after the switch.
    recipe = str(uuid.uuid4())
    report = report_job("beta", recipe)
    ids["report schedule"] = db.schedule(
        "report",
        "beta",
        report,
        report_hash(report),
        cron="0 6 * * *",
        deadline_at=now - timedelta(minutes=5),
        created_at=now - 20 * day,
    )
    ids["report completed"] = db.task(
        "report",
        "beta",
        report,
        report_hash(report),
        "completed",
        int((now - day).timestamp()),
        schedule_id=ids["report schedule"],
        created_at=now - day,
    )
    one_off = report_job("acme", str(uuid.uuid4()))
    ids["one-off schedule"] = db.schedule(
        "report", "acme", one_off, report_hash(one_off), deadline_at=now + 3 * day, created_at=now - day
    )
    return ids
