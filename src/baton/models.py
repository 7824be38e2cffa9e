"""SQLAlchemy tables: the whole persistent state of Baton lives here."""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


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


class SchedulerType(enum.StrEnum):
    BOEFJE = "boefje"
    NORMALIZER = "normalizer"
    REPORT = "report"


class TaskStatus(enum.StrEnum):
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class SchedulerState(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


def scheduler_id_for(scheduler_type: SchedulerType | str, organisation: str) -> str:
    return f"{SchedulerType(scheduler_type).value}-{organisation}"


class Base(DeclarativeBase):
    pass


class Organisation(Base):
    __tablename__ = "organisations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


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
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


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
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (
        # Pop reads the head of one queue: a partial index over queued tasks only keeps it O(log n).
        Index(
            "ix_tasks_pop",
            "scheduler_id",
            "priority",
            "seq",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        # Cross-organisation pop by type (the OpenKAT-compatible endpoint).
        Index(
            "ix_tasks_type_pop",
            "type",
            "priority",
            "seq",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        # Dedup is enforced by the database, not by a read-then-write race.
        Index(
            "uq_tasks_queued_hash",
            "scheduler_id",
            "hash",
            unique=True,
            postgresql_where=text("status = 'queued' AND hash IS NOT NULL"),
            sqlite_where=text("status = 'queued' AND hash IS NOT NULL"),
        ),
        Index("ix_tasks_scheduler_status", "scheduler_id", "status", "seq"),
        Index("ix_tasks_scheduler_hash", "scheduler_id", "hash"),
        Index("ix_tasks_status_modified", "status", "modified_at"),
        Index(
            "ix_tasks_recovered",
            "attempts",
            postgresql_where=text("attempts > 0"),
            sqlite_where=text("attempts > 0"),
        ),
    )


class Plugin(Base):
    """Catalogue entry: a boefje consumes object types, a normalizer consumes mime types."""

    __tablename__ = "plugins"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    consumes: Mapped[list[str]] = mapped_column(JSON)
    scan_level: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


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


class ReportSchedule(Base):
    __tablename__ = "report_schedules"

    id: Mapped[uuid.UUID] = mapped_column(Uuid(), primary_key=True, default=uuid.uuid4)
    organisation: Mapped[str] = mapped_column(ForeignKey("organisations.id", ondelete="CASCADE"), index=True)
    cron: Mapped[str] = mapped_column(String(128))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    next_run_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ApiToken(Base):
    """A bearer token: only its SHA-256 is stored; the token itself is shown once, at creation."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LeaderRecord(Base):
    """Who leads, written by the leader every round: for /metrics and failover measurements.

    The election itself is the advisory lock (or Lease); this row only reports it.
    """

    __tablename__ = "leaders"

    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime())
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime())
