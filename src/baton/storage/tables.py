"""SQLAlchemy tables: the whole persistent state of Baton lives here.

The partial-index predicates are defined once (QUEUED, QUEUED_WITH_HASH) and used both by the index
definitions and, as `IS_QUEUED`, by the statements in statements.py, so that a query's condition
always matches the index it needs.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    Uuid,
    literal_column,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction

from baton.core.model import SchedulerState, TaskStatus, utcnow

# Written as literals, not bound parameters: only then can SQLite (and a PostgreSQL generic plan)
# prove a query's condition implies the partial index's and use the index.
QUEUED = "status = 'queued'"
QUEUED_WITH_HASH = "status = 'queued' AND hash IS NOT NULL"


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONData = JSON().with_variant(JSONB(), "postgresql")
SeqInteger = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class Organisation(Base):
    __tablename__ = "organisations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Fair pop across organisations: the share of pops (relative) and a cap on tasks in flight
    # per queue of this organisation (None: no cap).
    weight: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    max_in_flight: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # "katalogus": created by the KATalogus sync, the only organisations it may remove; None: made in
    # Baton (the API, a RabbitMQ message, a push or message that named it).
    source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # When its boefje scheduler last wrote KATalogus' plugin listing for it (None: never).
    catalogue_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # When the KATalogus sync retired it (KATalogus no longer lists it; None: active): its schedulers do
    # not run, its queues take no task, its tasks and schedules stay readable (storage/control/organisation_sync.py).
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (
        Index(
            "ix_organisations_retired",
            "id",
            postgresql_where=text("retired_at IS NOT NULL"),
            sqlite_where=text("retired_at IS NOT NULL"),
        ),
    )


# The retired organisations (few), read through ix_organisations_retired.
IS_RETIRED = Organisation.retired_at.is_not(None)


class LeaseHolder(Base):
    """A process that holds scheduler leases (storage/control/scheduler_leases.py): one row, renewed once per
    retry period, keeps every scheduler row it owns leased and heartbeating (as an etcd lease keeps
    the keys attached to it), however many there are."""

    __tablename__ = "lease_holders"

    owner: Mapped[str] = mapped_column(String(256), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime())


class later_of(GenericFunction[datetime | None]):
    """The later of two timestamps, either of which may be NULL."""

    inherit_cache = True


@compiles(later_of, "postgresql")
def _later_of_postgresql(element: later_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"GREATEST({compiler.process(element.clauses, **kw)})"


@compiles(later_of, "sqlite")
def _later_of_sqlite(element: later_of, compiler: SQLCompiler, **kw: Any) -> str:
    first, second = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"max(coalesce({first}, {second}), coalesce({second}, {first}))"  # max() of SQLite is NULL with a NULL


class Scheduler(Base):
    """One row per (organisation, type): it is both the queue and the scheduler's live state."""

    __tablename__ = "schedulers"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    organisation: Mapped[str] = mapped_column(ForeignKey("organisations.id", ondelete="CASCADE"), index=True)
    type: Mapped[str] = mapped_column(String(16))
    maxsize: Mapped[int] = mapped_column(Integer)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    runner: Mapped[str | None] = mapped_column(String(32), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default=SchedulerState.STOPPED.value)
    location: Mapped[str | None] = mapped_column(String(256), nullable=True)
    # What the row itself says (written at claims, releases and state changes); `heartbeat_at` and
    # `lease_expires_at` below read the later of that and the owner's lease-holder row.
    written_heartbeat_at: Mapped[datetime | None] = mapped_column("heartbeat_at", UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Ownership (storage/control/scheduler_leases.py): who runs this scheduler, under which term (the fencing token:
    # it grows on every claim), and until when unless its holder renews.
    owner: Mapped[str | None] = mapped_column(String(256), nullable=True)
    term: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    written_lease_expires_at: Mapped[datetime | None] = mapped_column("lease_expires_at", UTCDateTime(), nullable=True)
    holder_renewed_at: Mapped[datetime | None] = column_property(
        select(LeaseHolder.renewed_at).where(LeaseHolder.owner == owner).correlate_except(LeaseHolder).scalar_subquery()
    )
    holder_expires_at: Mapped[datetime | None] = column_property(
        select(LeaseHolder.expires_at).where(LeaseHolder.owner == owner).correlate_except(LeaseHolder).scalar_subquery()
    )

    __table_args__ = (
        Index("ix_schedulers_owner_term", "owner", "term"),
        Index("ix_schedulers_lease_expires", "lease_expires_at"),
        Index(
            "ix_schedulers_owner_disabled",
            "owner",
            postgresql_where=text("NOT enabled"),
            sqlite_where=text("enabled = 0"),  # as SQLAlchemy writes `not enabled` there
        ),
    )

    @hybrid_property
    def heartbeat_at(self) -> datetime | None:
        """The scheduler's last sign of life: its own row's, or its holder's last renewal."""
        return _later(self.written_heartbeat_at, self.holder_renewed_at)

    @heartbeat_at.inplace.setter
    def _set_heartbeat_at(self, value: datetime | None) -> None:
        self.written_heartbeat_at = value

    @heartbeat_at.inplace.expression
    @classmethod
    def _heartbeat_at_expression(cls) -> ColumnElement[datetime | None]:
        return later_of(cls.written_heartbeat_at, _holder(LeaseHolder.renewed_at, cls.owner), type_=UTCDateTime())

    @hybrid_property
    def lease_expires_at(self) -> datetime | None:
        """Until when the row is leased: its own claim's lease, or its holder's, whichever ends later."""
        return _later(self.written_lease_expires_at, self.holder_expires_at)

    @lease_expires_at.inplace.setter
    def _set_lease_expires_at(self, value: datetime | None) -> None:
        self.written_lease_expires_at = value

    @lease_expires_at.inplace.expression
    @classmethod
    def _lease_expires_at_expression(cls) -> ColumnElement[datetime | None]:
        return later_of(cls.written_lease_expires_at, _holder(LeaseHolder.expires_at, cls.owner), type_=UTCDateTime())


def _holder(column: Any, owner: Any) -> Any:
    return select(column).where(LeaseHolder.owner == owner).correlate_except(LeaseHolder).scalar_subquery()


def _later(first: datetime | None, second: datetime | None) -> datetime | None:
    return max((value for value in (first, second) if value is not None), default=None)


class Task(Base):
    __tablename__ = "tasks"

    # `seq` orders ties FIFO even when two tasks share a timestamp; `id` is the public identity.
    seq: Mapped[int] = mapped_column(SeqInteger, primary_key=True, autoincrement=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(), unique=True, default=uuid.uuid4)
    scheduler_id: Mapped[str] = mapped_column(ForeignKey("schedulers.id", ondelete="CASCADE"))
    schedule_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    organisation: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=TaskStatus.QUEUED.value)
    hash: Mapped[str | None] = mapped_column(String(256), nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSONData)
    # Start-time fair queuing tag, set at push (see statements.py): among equal priorities, a pop
    # across organisations takes the smallest, so each backlogged organisation gets its share.
    fair_key: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The pop that handed the task out last (core/receipts.py): settled, its tasks go back to queued.
    # No index: a receipt's tasks are found by (status, modified_at), the pop's time.
    receipt: Mapped[uuid.UUID | None] = mapped_column(Uuid(), nullable=True)

    __table_args__ = (
        # Pop reads the head of one queue: a partial index over queued tasks only keeps it O(log n).
        Index(
            "ix_tasks_pop",
            "scheduler_id",
            "priority",
            "seq",
            postgresql_where=text(QUEUED),
            sqlite_where=text(QUEUED),
        ),
        # Cross-organisation pop by type in strict priority order (BATON_FAIRNESS=false).
        Index(
            "ix_tasks_type_pop",
            "type",
            "priority",
            "seq",
            postgresql_where=text(QUEUED),
            sqlite_where=text(QUEUED),
        ),
        # Cross-organisation pop by type, fair: priority, then the fair-queuing tag.
        Index(
            "ix_tasks_fair_pop",
            "type",
            "priority",
            "fair_key",
            "seq",
            postgresql_where=text(QUEUED),
            sqlite_where=text(QUEUED),
        ),
        # Dedup is enforced by the database, not by a read-then-write race.
        Index(
            "uq_tasks_queued_hash",
            "scheduler_id",
            "hash",
            unique=True,
            postgresql_where=text(QUEUED_WITH_HASH),
            sqlite_where=text(QUEUED_WITH_HASH),
        ),
        Index("ix_tasks_scheduler_status", "scheduler_id", "status", "seq"),
        Index("ix_tasks_scheduler_hash", "scheduler_id", "hash"),
        Index("ix_tasks_status_modified", "status", "modified_at"),
        Index("ix_tasks_modified", "modified_at"),
        Index("ix_tasks_created", "created_at"),
        Index(
            "ix_tasks_recovered",
            "attempts",
            postgresql_where=text("attempts > 0"),
            sqlite_where=text("attempts > 0"),
        ),
    )


IS_QUEUED = Task.status == literal_column("'queued'")
IS_DISPATCHED = Task.status == literal_column("'dispatched'")


class QueueCounter(Base):
    """Queued and in-flight counts per queue, kept by triggers on `tasks` in the writing transaction.

    PostgreSQL spreads each queue over a few shards (by backend) so concurrent pops and pushes of
    one queue do not queue up on one row; a queue's count is the sum of its shards. `last_key` is the
    queue's fair-queuing clock: the largest tag its pushes handed out.
    """

    __tablename__ = "queue_counters"

    scheduler_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    queued: Mapped[int] = mapped_column(BigInteger, default=0)
    in_flight: Mapped[int] = mapped_column(BigInteger, default=0)
    last_key: Mapped[int] = mapped_column(BigInteger, default=0)


class PopReceipt(Base):
    """An idempotency key a pop carried (core/receipts.py): until `expires_at`, the same key on the
    same queue or type (`scope`) answers the tasks still dispatched under `receipt`."""

    __tablename__ = "pop_receipts"

    scope: Mapped[str] = mapped_column(String(160), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    receipt: Mapped[uuid.UUID] = mapped_column(Uuid(), index=True)
    popped_at: Mapped[datetime] = mapped_column(UTCDateTime())  # the receipt's pop: its tasks' modified_at
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class PendingSettlement(Base):
    """A pop receipt to settle once more at `due_at` (core/receipts.py): its pop's outcome was unknown
    when it was first settled, so its statement may still commit. Written when the receipt is first
    settled, so whichever process comes next (the popping one, or any housekeeper if it died) settles
    it: nothing waits in one process's memory for the task timeout."""

    __tablename__ = "pending_settlements"

    receipt: Mapped[uuid.UUID] = mapped_column(Uuid(), primary_key=True)
    popped_at: Mapped[datetime] = mapped_column(UTCDateTime())
    due_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class Plugin(Base):
    """Catalogue entry: a boefje consumes object types, a normalizer consumes mime types."""

    __tablename__ = "plugins"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    consumes: Mapped[list[str]] = mapped_column(JSON)
    scan_level: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # What OpenKAT's runners need to run a boefje: its version and container image.
    version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    oci_image: Mapped[str | None] = mapped_column(String(512), nullable=True)
    # From KATalogus: when to scan an object again (a cron expression, or minutes between runs), and
    # the scan-profile operations ("create", "update") a boefje runs on instead of being rescanned.
    cron: Mapped[str | None] = mapped_column(String(128), nullable=True)
    interval: Mapped[int | None] = mapped_column(Integer, nullable=True)
    run_on: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)


class PluginSetting(Base):
    """Per-organisation override of a plugin's `enabled` flag."""

    __tablename__ = "plugin_settings"

    organisation: Mapped[str] = mapped_column(ForeignKey("organisations.id", ondelete="CASCADE"), primary_key=True)
    plugin_id: Mapped[str] = mapped_column(ForeignKey("plugins.id", ondelete="CASCADE"), primary_key=True)
    enabled: Mapped[bool] = mapped_column(Boolean)


class Event(Base):
    """Inbox of events for a scheduler; consumed in the same transaction that creates its tasks."""

    __tablename__ = "events"

    seq: Mapped[int] = mapped_column(SeqInteger, primary_key=True, autoincrement=True)
    scheduler_id: Mapped[str] = mapped_column(ForeignKey("schedulers.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    consumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Set when the event was rejected as malformed or unprocessable: the row is its dead letter.
    error: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (
        Index(
            "ix_events_pending",
            "scheduler_id",
            "seq",
            postgresql_where=text("consumed_at IS NULL"),
            sqlite_where=text("consumed_at IS NULL"),
        ),
    )


class BoefjeRun(Base):
    """When a (boefje, object) pair was last queued in an organisation: the grace period's memory."""

    __tablename__ = "boefje_runs"

    organisation: Mapped[str] = mapped_column(ForeignKey("organisations.id", ondelete="CASCADE"), primary_key=True)
    boefje_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    object_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime())


class BoefjeBackfill(Base):
    """A boefje newly enabled for an organisation: its existing objects still to be given tasks, read
    from Octopoes a page at a time at one `valid_time` (so the pages agree), from `next_offset` on."""

    __tablename__ = "boefje_backfills"

    organisation: Mapped[str] = mapped_column(ForeignKey("organisations.id", ondelete="CASCADE"), primary_key=True)
    boefje_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    object_types: Mapped[list[str]] = mapped_column(JSON)
    scan_level: Mapped[int] = mapped_column(Integer)
    valid_time: Mapped[datetime] = mapped_column(UTCDateTime())
    next_offset: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TwinCheck(Base):
    """A boefje task made and not yet looked at for twins in other organisations: written in the
    transaction that made the task, removed by the twin step that looks at it (so a restart between the
    two loses none). Goes with its task."""

    __tablename__ = "twin_checks"

    task_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    organisation: Mapped[str] = mapped_column(String(64))
    boefje_id: Mapped[str] = mapped_column(String(128))
    scan_level: Mapped[int] = mapped_column(Integer)  # the boefje's, when the task was made
    input_ooi: Mapped[str] = mapped_column(String(512))
    noted_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ix_twin_checks_organisation", "organisation", "noted_at"),)


class OutsideService(Base):
    """An outside service's state as its callers last saw it (KATalogus, Octopoes, Bytes): failing
    since `down_since` (None: answering), and when a caller last said so."""

    __tablename__ = "outside_services"

    service: Mapped[str] = mapped_column(String(32), primary_key=True)
    down_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    checked_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Schedule(Base):
    """When to create a task again: a cron expression (`schedule`) or a one-off `deadline_at`, with the
    task's `data` (an OpenKAT job). OpenKAT's schedules; Baton's report schedules are these too."""

    __tablename__ = "schedules"

    id: Mapped[uuid.UUID] = mapped_column(Uuid(), primary_key=True, default=uuid.uuid4)
    scheduler_id: Mapped[str] = mapped_column(String(16))  # the task type, as OpenKAT names it
    organisation: Mapped[str] = mapped_column(ForeignKey("organisations.id", ondelete="CASCADE"))
    hash: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSONData)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    schedule: Mapped[str | None] = mapped_column(String(128), nullable=True)
    deadline_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Why the rescans disabled it (core/rescans.py's reasons; None: enabled, or disabled by hand).
    disabled_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    disabled_detail: Mapped[str | None] = mapped_column(String(512), nullable=True)

    __table_args__ = (
        Index("ix_schedules_due", "scheduler_id", "organisation", "deadline_at"),
        Index("ix_schedules_created", "created_at"),
        # Which schedules are due, over every scheduler: one statement per process and poll interval.
        Index(
            "ix_schedules_deadline_enabled",
            "deadline_at",
            postgresql_where=text("enabled"),
            sqlite_where=text("enabled = 1"),
        ),
    )


class ApiToken(Base):
    """A bearer token: only its SHA-256 is stored; the token itself is shown once, at creation."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LeaderRecord(Base):
    """A leadership lease (storage/control/leadership.py): its holder, its term (grows on every takeover) and
    when it expires unless renewed. With a Kubernetes Lease elector the row only reports."""

    __tablename__ = "leaders"

    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime())
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    term: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The holder also holds the liveness lock (PostgreSQL): when that lock is free, it is gone.
    holds_lock: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class WorkerRecord(Base):
    """A live `baton worker`: peers count the live ones to compute their fair share of schedulers."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


def configure_orm() -> None:
    """Set up the ORM's mappers now rather than at the first query (a fork server does it once, so its
    children share those pages)."""
    from sqlalchemy.orm import configure_mappers

    configure_mappers()


class MulaImport(Base):
    """`baton import-mula`'s record (storage/mula_import/): mula's state taken over into this database.
    One row (`id` 1): a Baton database takes over one mula. `finished_at` None: an import began and did not
    finish, and a run again completes it; set: every later run changes nothing."""

    __tablename__ = "mula_imports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(512))  # mula's database, as the command described it
    revision: Mapped[str] = mapped_column(String(32))  # mula's alembic revision
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
