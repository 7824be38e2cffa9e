"""Database access: engine set-up per backend, migrations, sessions, organisations and scheduler rows."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from baton.config import normalise_database_url
from baton.models import Organisation, Scheduler, SchedulerState, SchedulerType, scheduler_id_for, utcnow

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Arbitrary constant key: serialises `migrate` across replicas starting at once on PostgreSQL.
MIGRATION_LOCK_KEY = 0x0BA7_0001


class NotFoundError(LookupError):
    """An organisation, queue or task that does not exist."""


class ConflictError(ValueError):
    """A create that collides with an existing row, or an illegal state change."""


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite otherwise defers it).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Take the write lock up front: writers queue on busy_timeout instead of failing to upgrade.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def make_engine(url: str) -> Engine:
    url = normalise_database_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _configure_sqlite(engine)
        return engine
    # No pre-ping: it costs a round trip per request. After a database restart the first statement
    # on a stale connection fails (503 once) and SQLAlchemy then invalidates the whole pool.
    return create_engine(url, pool_size=10, max_overflow=20, pool_recycle=1800)


class Store:
    """Owns the engine; every unit of work runs in `with store.session() as s:` (one transaction)."""

    def __init__(self, url: str) -> None:
        self.url = normalise_database_url(url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()

    # -- migrations -------------------------------------------------------------------------------
    def _alembic_config(self) -> AlembicConfig:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        return cfg

    def migrate(self) -> None:
        cfg = self._alembic_config()
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def migrations_current(self) -> bool:
        head = ScriptDirectory.from_config(self._alembic_config()).get_current_head()
        with self.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
        return current == head

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))


# -- organisations ----------------------------------------------------------------------------------


def create_organisation(session: Session, org_id: str, name: str, maxsize: int) -> Organisation:
    """Create an organisation and its three queues (one scheduler row per type)."""
    if session.get(Organisation, org_id) is not None:
        raise ConflictError(f"organisation '{org_id}' already exists")
    org = Organisation(id=org_id, name=name, created_at=utcnow())
    session.add(org)
    for scheduler_type in SchedulerType:
        session.add(
            Scheduler(
                id=scheduler_id_for(scheduler_type, org_id),
                organisation=org_id,
                type=scheduler_type.value,
                maxsize=maxsize,
                enabled=True,
                state=SchedulerState.STOPPED.value,
                created_at=utcnow(),
            )
        )
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent create of the same id won the race
        raise ConflictError(f"organisation '{org_id}' already exists") from exc
    return org


def list_organisations(session: Session) -> Sequence[Organisation]:
    return session.scalars(select(Organisation).order_by(Organisation.id)).all()


def get_organisation(session: Session, org_id: str) -> Organisation:
    org = session.get(Organisation, org_id)
    if org is None:
        raise NotFoundError(f"organisation '{org_id}' not found")
    return org


def delete_organisation(session: Session, org_id: str) -> None:
    """Delete an organisation with its queues and tasks (foreign keys cascade)."""
    org = get_organisation(session, org_id)
    session.delete(org)


# -- scheduler rows (queues and their live state) ---------------------------------------------------


def get_scheduler(session: Session, scheduler_id: str) -> Scheduler:
    row = session.get(Scheduler, scheduler_id)
    if row is None:
        raise NotFoundError(f"queue '{scheduler_id}' not found")
    return row


def list_schedulers(session: Session, organisation: str | None = None) -> Sequence[Scheduler]:
    query = select(Scheduler).order_by(Scheduler.id)
    if organisation is not None:
        query = query.where(Scheduler.organisation == organisation)
    return session.scalars(query).all()


def record_heartbeat(
    session: Session,
    scheduler_id: str,
    *,
    state: SchedulerState,
    runner: str,
    location: str,
    now: datetime | None = None,
) -> Scheduler | None:
    """Write a scheduler's live state; None when its row is gone (organisation deleted)."""
    row = session.get(Scheduler, scheduler_id)
    if row is None:
        return None
    row.state = state.value
    row.runner = runner
    row.location = location
    row.heartbeat_at = now or utcnow()
    return row


def process_location() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"
