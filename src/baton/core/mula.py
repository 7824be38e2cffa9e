"""Taking over mula's state (`baton import-mula`), the rules without I/O: which of mula's schemas are
read, what each of mula's rows becomes in Baton, which rows are left out and why, and the tally the
command prints.

mula (OpenKAT's scheduler) keeps two tables, `schedules` and `tasks`, and alembic's `alembic_version`.
OpenKAT v1.17 and v1.18 ship revision 0008 (one scheduler per organisation and type: `scheduler_id` is
`boefje-acme`, and the organisation is only inside `data`); 0009 adds an `organisation` column to both
tables (and mula v1.19 on names its schedulers by type only: `boefje`; rows of an upgraded database keep
their old `scheduler_id`); 0010 (v1.19, v1.20) adds an index. Statuses are a PostgreSQL enum whose
values are the upper-case names (`QUEUED`).

A mula row keeps its id, times, priority, hash and `data` (byte for byte) in Baton; its queue is Baton's
`{type}-{organisation}`. Two statuses change, each with the reason in the task's `reason`:

- `PENDING` becomes `cancelled`. mula v1.17 to v1.20 never writes it (a task is stored `QUEUED` by the
  push that queues it; `PENDING` is only the model's default, and the store's `create_task` that could
  keep it is called by mula's tests alone), never pops it (every pop reads `QUEUED` rows) and never
  changes it; its one effect is that a boefje's latest task in that state blocks the boefje's rescans of
  the object for ever. Queued in Baton it would run work mula never would; `cancelled` keeps it listed
  and, as Baton's grace period counts from `boefje_runs`, blocks nothing.
- A second `QUEUED` task with the same hash in one queue (mula allows it; Baton's unique index of queued
  hashes does not) becomes `cancelled`: the copy mula would hand out first (`priority`, then
  `created_at`) stays queued.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from baton.core.model import SchedulerType, TaskStatus, scheduler_id_for

# alembic revisions of mula's schema this release reads, and the OpenKAT releases that ship each.
SUPPORTED_REVISIONS: Mapping[str, str] = {
    "0008": "OpenKAT v1.17, v1.18",
    "0009": "on the way from v1.18 to v1.19 (no release stops there)",
    "0010": "OpenKAT v1.19, v1.20",
}
OLDER_REVISIONS = frozenset(f"{number:04d}" for number in range(1, 8))
# Which mula tables and columns each revision has (what import-mula reads; mula has no others).
SCHEDULE_COLUMNS = (
    "id",
    "scheduler_id",
    "hash",
    "data",
    "enabled",
    "schedule",
    "deadline_at",
    "created_at",
    "modified_at",
)
TASK_COLUMNS = (
    "id",
    "scheduler_id",
    "schedule_id",
    "type",
    "hash",
    "priority",
    "data",
    "status",
    "created_at",
    "modified_at",
)
ORGANISATION_SINCE = "0009"  # the revision that adds `organisation` to both tables
STATUS_TYPE = "taskstatus"
MULA_STATUSES = ("PENDING", "QUEUED", "DISPATCHED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
# The tables whose presence makes a schema "someone's": mula's two and alembic's.
MULA_TABLES = ("tasks", "schedules", "alembic_version")

# What Baton's columns hold at most (storage/tables.py).
MAX_ORGANISATION = 64
MAX_TASK_HASH = 256
MAX_SCHEDULE_HASH = 64
MAX_CRON = 128
MAX_BOEFJE_ID = 128
MAX_OBJECT_KEY = 512
# mula's `priority` may be NULL (rows from before revision 0008); its pop (`priority ASC`) sorts NULL
# last, as this does.
PRIORITY_OF_NULL = 2**31 - 1
ORGANISATION_CODE = re.compile(r"^[-\w][-.\w]*$")  # OpenKAT's codes, as Baton's OpenKAT dialect takes them

PENDING_REASON = "pending in mula: made but never queued there (mula never hands such a task out)"
DUPLICATE_REASON = (
    "queued twice in mula (same hash, same queue): the copy mula would have handed out first stays queued"
)

# Why a row is left out.
UNKNOWN_TYPE = "type is not boefje, normalizer or report"
NO_ORGANISATION = "no organisation (neither a column nor in its data)"
BAD_ORGANISATION = "organisation code Baton cannot hold (letters, digits, '-', '_', '.'; at most 64)"
UNKNOWN_STATUS = "status is not one of mula's"
LONG_HASH = "hash longer than Baton's column"
LONG_CRON = "cron expression longer than 128 characters"
NO_OBJECT = "no boefje id or input object"
LONG_KEY = "boefje id or object longer than Baton's columns"

_STATUSES: Mapping[str, TaskStatus] = {
    "QUEUED": TaskStatus.QUEUED,
    "DISPATCHED": TaskStatus.DISPATCHED,
    "RUNNING": TaskStatus.RUNNING,
    "COMPLETED": TaskStatus.COMPLETED,
    "FAILED": TaskStatus.FAILED,
    "CANCELLED": TaskStatus.CANCELLED,
    "PENDING": TaskStatus.CANCELLED,
}
_TYPES = frozenset(kind.value for kind in SchedulerType)


# -- the schema -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaFacts:
    """What a database's catalogue says about one schema: the columns of its `tasks`, `schedules` and
    `alembic_version` tables (name -> type, as `format_type` prints it), the labels of its `taskstatus`
    enum, and the revision alembic recorded."""

    where: str  # for messages: `schema public of PostgreSQL at ...`
    tables: Mapping[str, Mapping[str, str]]
    status_labels: tuple[str, ...] = ()
    revision: str | None = None


@dataclass(frozen=True)
class MulaLayout:
    """A schema read as mula's: its revision, and whether rows carry their organisation in a column."""

    revision: str

    @property
    def has_organisation(self) -> bool:
        return self.revision >= ORGANISATION_SINCE

    @property
    def release(self) -> str:
        return SUPPORTED_REVISIONS[self.revision]


class NotMulaError(Exception):
    """The schema is not mula's at a revision this release reads; the message says what was found.
    `batons`: it holds Baton's own tables (so nothing of mula's either)."""

    def __init__(self, message: str, *, batons: bool = False) -> None:
        super().__init__(message)
        self.batons = batons


def read_layout(facts: SchemaFacts) -> MulaLayout | None:
    """The schema as mula's (None: none of mula's tables is there at all); NotMulaError, saying what was
    found instead, when it is something else or another revision."""
    present = [name for name in MULA_TABLES if name in facts.tables]
    if not present:
        return None
    tasks = facts.tables.get("tasks", {})
    if "seq" in tasks:
        raise NotMulaError(f"{facts.where} holds Baton's own tables, not mula's", batons=True)
    if "alembic_version" not in facts.tables:
        raise NotMulaError(f"{facts.where} is not mula's database: it has {', '.join(present)} but no alembic_version")
    revision = facts.revision
    if revision is None:
        raise NotMulaError(f"{facts.where} is not mula's database: alembic_version is empty")
    if revision in OLDER_REVISIONS:
        raise NotMulaError(
            f"{facts.where} holds mula's schema at alembic revision {revision}, older than import-mula reads "
            f"(0008 to 0010: OpenKAT v1.17 to v1.20); upgrade OpenKAT (update-mula-db) first"
        )
    if revision not in SUPPORTED_REVISIONS:
        raise NotMulaError(
            f"{facts.where} is at alembic revision {revision}, which is not one of mula's that import-mula reads "
            f"(0008 to 0010: OpenKAT v1.17 to v1.20)"
        )
    layout = MulaLayout(revision)
    extra = ("organisation",) if layout.has_organisation else ()
    for table, columns in (("schedules", SCHEDULE_COLUMNS + extra), ("tasks", TASK_COLUMNS + extra)):
        found = facts.tables.get(table)
        if found is None:
            raise NotMulaError(f"{facts.where} is not mula's schema at revision {revision}: it has no {table} table")
        missing = [name for name in columns if name not in found]
        if missing:
            raise NotMulaError(
                f"{facts.where} is not mula's schema at revision {revision}: {table} has no column {', '.join(missing)}"
            )
    if tasks.get("status") != STATUS_TYPE or not set(MULA_STATUSES) <= set(facts.status_labels):
        raise NotMulaError(
            f"{facts.where} is not mula's schema at revision {revision}: tasks.status is not mula's taskstatus enum"
        )
    return layout


def foreign_tables(facts: SchemaFacts) -> str | None:
    """Why Baton's migrations must not run in this schema, and what to do (None: they may): it holds
    mula's tables (OpenKAT's scheduler database, shared), or another application's `tasks`."""
    tasks = facts.tables.get("tasks")
    if tasks is None or "seq" in tasks:
        return None
    advice = "Baton's tables need a schema of their own: set BATON_DATABASE_SCHEMA (e.g. baton) or use another database"
    if facts.status_labels or "schedules" in facts.tables:
        revision = f" (alembic revision {facts.revision})" if facts.revision else ""
        return (
            f"{facts.where} holds the tables of OpenKAT's scheduler, mula{revision}; {advice}, then run "
            "`baton import-mula <mula's database URL>` to take over mula's state"
        )
    return f"{facts.where} holds a table `tasks` that is not Baton's; {advice}"


# -- rows ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Skipped:
    """A mula row left out of Baton, and why."""

    reason: str


@dataclass(frozen=True, slots=True)
class MulaSchedule:
    """A row of mula's `schedules`. `organisation`: the column (revision 0009 on) or, at 0008, what mula's
    own migration 0009 would have written from `data`."""

    id: uuid.UUID
    scheduler_id: str
    organisation: str | None
    hash: str | None
    data: str  # the jsonb as PostgreSQL prints it
    enabled: bool
    schedule: str | None
    deadline_at: datetime | None
    created_at: datetime
    modified_at: datetime


@dataclass(frozen=True, slots=True)
class MulaTask:
    """A row of mula's `tasks` (`organisation` as for MulaSchedule)."""

    id: uuid.UUID
    scheduler_id: str
    organisation: str | None
    type: str
    status: str
    priority: int | None
    hash: str | None
    schedule_id: uuid.UUID | None
    data: str
    created_at: datetime
    modified_at: datetime


@dataclass(frozen=True, slots=True)
class MulaRun:
    """The latest boefje task (by `created_at`) of one hash, the one mula measures the grace period of
    its (boefje, object) from."""

    organisation: str | None
    scheduler_id: str
    boefje_id: str | None
    input_ooi: str | None
    modified_at: datetime


@dataclass(frozen=True, slots=True)
class ImportedSchedule:
    """A row of Baton's `schedules` made from mula's (`scheduler_id` holds the type, as in OpenKAT)."""

    id: uuid.UUID
    scheduler_id: str
    organisation: str
    hash: str | None
    data: str
    enabled: bool
    schedule: str | None
    deadline_at: datetime | None
    created_at: datetime
    modified_at: datetime


@dataclass(frozen=True, slots=True)
class ImportedTask:
    """A row of Baton's `tasks` made from mula's (`queue`: Baton's scheduler id)."""

    id: uuid.UUID
    queue: str
    schedule_id: str | None
    organisation: str
    type: str
    priority: int
    status: str
    hash: str | None
    data: str
    reason: str | None
    created_at: datetime
    modified_at: datetime


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """A row of Baton's `boefje_runs`: when mula's grace period for (boefje, object) started."""

    organisation: str
    boefje_id: str
    object_key: str
    queued_at: datetime


def organisation_refusal(code: str | None) -> str | None:
    """Why an organisation cannot be one of Baton's (None: it can)."""
    if not code:
        return NO_ORGANISATION
    if len(code) > MAX_ORGANISATION or not ORGANISATION_CODE.match(code):
        return BAD_ORGANISATION
    return None


def organisation_of(given: str | None, scheduler_id: str) -> str | None:
    """A row's organisation: as mula recorded it, else (revision 0008, nothing in `data`) the tail of its
    per-organisation scheduler id (`boefje-acme`)."""
    if given:
        return given
    kind, dash, tail = scheduler_id.partition("-")
    return tail if dash and kind in _TYPES and tail else None


def schedule_type(scheduler_id: str) -> str | None:
    """The task type a mula schedule makes: its scheduler id (`boefje`) or that id's head (`boefje-acme`)."""
    kind = scheduler_id.partition("-")[0]
    return kind if kind in _TYPES else None


def queue_of(task_type: str, organisation: str) -> str:
    """The Baton queue of a mula task: one per organisation and type."""
    return scheduler_id_for(task_type, organisation)


def imported_schedule(row: MulaSchedule, organisations: Collection[str]) -> ImportedSchedule | Skipped:
    """Baton's row for a mula schedule, or why it is left out. `organisations`: the codes Baton holds."""
    kind = schedule_type(row.scheduler_id)
    if kind is None:
        return Skipped(UNKNOWN_TYPE)
    organisation = organisation_of(row.organisation, row.scheduler_id)
    if organisation is None:
        return Skipped(NO_ORGANISATION)
    if organisation not in organisations:
        return Skipped(organisation_refusal(organisation) or BAD_ORGANISATION)
    if row.hash is not None and len(row.hash) > MAX_SCHEDULE_HASH:
        return Skipped(LONG_HASH)
    if row.schedule is not None and len(row.schedule) > MAX_CRON:
        return Skipped(LONG_CRON)
    return ImportedSchedule(
        id=row.id,
        scheduler_id=kind,
        organisation=organisation,
        hash=row.hash,
        data=row.data,
        enabled=row.enabled,
        schedule=row.schedule,
        deadline_at=row.deadline_at,
        created_at=row.created_at,
        modified_at=row.modified_at,
    )


def imported_task(row: MulaTask, organisations: Collection[str]) -> ImportedTask | Skipped:
    """Baton's row for a mula task, or why it is left out (the module's description says what changes)."""
    if row.type not in _TYPES:
        return Skipped(UNKNOWN_TYPE)
    status = _STATUSES.get(row.status)
    if status is None:
        return Skipped(UNKNOWN_STATUS)
    organisation = organisation_of(row.organisation, row.scheduler_id)
    if organisation is None:
        return Skipped(NO_ORGANISATION)
    if organisation not in organisations:
        return Skipped(organisation_refusal(organisation) or BAD_ORGANISATION)
    if row.hash is not None and len(row.hash) > MAX_TASK_HASH:
        return Skipped(LONG_HASH)
    return ImportedTask(
        id=row.id,
        queue=queue_of(row.type, organisation),
        schedule_id=None if row.schedule_id is None else str(row.schedule_id),
        organisation=organisation,
        type=row.type,
        priority=PRIORITY_OF_NULL if row.priority is None else row.priority,
        status=status.value,
        hash=row.hash,
        data=row.data,
        reason=PENDING_REASON if row.status == "PENDING" else None,
        created_at=row.created_at,
        modified_at=row.modified_at,
    )


def imported_run(row: MulaRun, organisations: Collection[str]) -> ImportedRun | Skipped:
    """Baton's memory of the grace period of one (boefje, object): mula measures it from the latest task's
    `modified_at`."""
    code = organisation_of(row.organisation, row.scheduler_id)
    if code is None:
        return Skipped(NO_ORGANISATION)
    if code not in organisations:
        return Skipped(organisation_refusal(code) or BAD_ORGANISATION)
    if not row.boefje_id or not row.input_ooi:
        return Skipped(NO_OBJECT)
    if len(row.boefje_id) > MAX_BOEFJE_ID or len(row.input_ooi) > MAX_OBJECT_KEY:
        return Skipped(LONG_KEY)
    return ImportedRun(code, row.boefje_id, row.input_ooi, row.modified_at)


# -- the tally -------------------------------------------------------------------------------------

KINDS = ("organisations", "schedules", "tasks", "boefje_runs")


@dataclass
class KindTally:
    """What became of one kind of row: `read` from mula; `added` to Baton (or, for boefje runs, moved
    later); `present` already in Baton as it is (a run before this one wrote it); `skipped` left out,
    by reason; `changed` imported with another status, by what changed."""

    read: int = 0
    added: int = 0
    present: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    changed: Counter[str] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "added": self.added,
            "present": self.present,
            "skipped": dict(self.skipped),
            "changed": dict(self.changed),
        }


PENDING_CHANGE = "pending -> cancelled"
DUPLICATE_CHANGE = "queued duplicate -> cancelled"


@dataclass
class ImportTally:
    """The counts `baton import-mula` prints, per kind, and the statuses of the tasks read."""

    kinds: dict[str, KindTally] = field(default_factory=lambda: {kind: KindTally() for kind in KINDS})
    statuses: Counter[str] = field(default_factory=Counter)

    def __getitem__(self, kind: str) -> KindTally:
        return self.kinds[kind]

    @property
    def changed_anything(self) -> bool:
        return any(tally.added for tally in self.kinds.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "kinds": {kind: tally.as_json() for kind, tally in self.kinds.items()},
            "statuses": dict(self.statuses),
        }
