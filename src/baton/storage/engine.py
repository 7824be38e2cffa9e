"""The database: engine set-up per backend, sessions (one transaction each), migrations.

Alembic is imported only by the code that migrates: a process that only checks the schema (a scheduler,
an API replica's readiness probe) compares the database's revision with the head read from the
migration scripts' source, which costs a few kilobytes instead of alembic's ~10 MiB.
"""

from __future__ import annotations

import ast
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from baton.core.diagnosis import reason
from baton.core.errors import ConfigurationError
from baton.core.settings import normalise_database_url
from baton.storage.errors import DATABASE, translated
from baton.storage.foreign_tables import refuse_foreign_tables
from baton.storage.urls import database_address

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

# The unit of work (one transaction) every layer above storage passes around: they name its type from
# here, never from SQLAlchemy.
__all__ = ["Session", "Store"]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"  # alembic's default, which env.py keeps
# Arbitrary constant key: serialises `migrate` across replicas starting at once on PostgreSQL.
MIGRATION_LOCK_KEY = 0x0BA7_0001
# Baton's transactions last milliseconds. One left open by a frozen process (SIGSTOP, a paused
# container) would hold its row locks, and with them a scheduler that others must take over, for as
# long as the freeze: PostgreSQL ends such a session after this long, well within a lease (15 s).
IDLE_IN_TRANSACTION_TIMEOUT_MS = 5000


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


def connection_name(pid: int | None = None) -> str:
    """What every connection of this process is called in pg_stat_activity: `baton <pid>@<host>`,
    the same process as the owner ids `host:pid#...` of its leases (storage/control/scheduler_leases.py ends
    the transactions of a process whose leases ran out). PostgreSQL keeps 63 bytes of it."""
    return f"baton {pid or os.getpid()}@{os.uname().nodename}"[:63]


def make_engine(url: str, pool_size: int = 10, max_overflow: int = 20, schema: str | None = None) -> Engine:
    address = database_address(normalise_database_url(url), schema)
    if address.backend == "sqlite":
        parsed = make_url(address.url)
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
        _configure_sqlite(engine)
        return engine
    # No pre-ping: it costs a round trip per request. After a database restart the first statement
    # on a stale connection fails (503 once) and SQLAlchemy then invalidates the whole pool; a new
    # connection is made when one is needed, so there is no reconnect back-off to wait out.
    engine = create_engine(
        "postgresql+psycopg://",
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        connect_args={
            "options": address.options_with(f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}"),
            "application_name": connection_name(),
        },
    )

    @event.listens_for(engine, "do_connect")
    def _connect_to_address(_dialect: Any, _record: Any, cargs: list[Any], _cparams: dict[str, Any]) -> None:
        # The libpq connection string, not SQLAlchemy's reading of the URL: every form libpq knows
        # (several hosts, PG* variables) reaches the same hosts as Baton's other connections.
        cargs[:] = [address.conninfo]

    _replace_connections_an_outage_outlived(engine)
    return engine


OUTAGES_WHEN_OPENED = "baton_outages_when_opened"


def _replace_connections_an_outage_outlived(engine: Engine) -> None:
    """A pooled connection opened before this process's latest database outage began is replaced when
    it is next checked out, without a round trip: the server it spoke to has restarted or failed over
    since. Used as it is, its first statement fails after the outage has ended and is taken for a new
    outage (a second warning and a 503 or a back-off). SQLAlchemy invalidates a pool on the first
    such failure, but each pool learns only from its own: the control engine's, idle through an
    outage the main pool met, kept its dead connections."""

    @event.listens_for(engine, "connect")
    def _opened(_dbapi_connection: Any, record: Any) -> None:
        record.info[OUTAGES_WHEN_OPENED] = DATABASE.outages

    @event.listens_for(engine, "checkout")
    def _checked_out(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.info.get(OUTAGES_WHEN_OPENED, DATABASE.outages) < DATABASE.outages:
            raise DisconnectionError("opened before the latest database outage")  # the pool opens another


# The control engine's pool: leases, leadership and worker rounds; a handful of threads at most.
CONTROL_POOL_SIZE = 2
CONTROL_MAX_OVERFLOW = 3


class Store:
    """Owns the engine; every unit of work runs in `with store.session() as s:` (one transaction).

    Keeping leases alive is kept apart from the work they protect: on PostgreSQL, renewals, claims,
    leadership and worker rounds run in `control_session()`, on a small pool of their own. A process
    running thousands of scheduler threads shares its main pool between them; a renewal queued
    behind their ticks would come late, and a lease renewed late is a lease lost (or a hand-over
    that waits for every tick in the queue).
    """

    def __init__(self, url: str, schema: str | None = None) -> None:
        self.url = normalise_database_url(url)
        self.schema = schema  # BATON_DATABASE_SCHEMA (storage/urls.py)
        self.address = database_address(self.url, schema)  # refuses a URL that cannot work
        self.engine = make_engine(self.url, schema=schema)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._control_engine: Engine | None = None
        self._control_sessions: sessionmaker[Session] | None = None
        self._control_lock = threading.Lock()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def is_postgresql(self) -> bool:
        """The one test of which backend we run on; everything dialect-specific asks this."""
        return self.engine.dialect.name == "postgresql"

    @contextmanager
    def session(self) -> Iterator[Session]:
        with translated(), self._sessions.begin() as session:
            yield session

    @contextmanager
    def control_session(self) -> Iterator[Session]:
        """A transaction for lease and leadership bookkeeping (see the class docstring). SQLite has
        one writer at a time whatever the pool, so there it is an ordinary session."""
        if not self.is_postgresql:
            with self.session() as session:
                yield session
            return
        with translated(), self._control_sessionmaker().begin() as session:
            yield session

    @property
    def control_engine(self) -> Engine:
        """The engine behind `control_session()` (the main one on SQLite)."""
        if not self.is_postgresql:
            return self.engine
        self._control_sessionmaker()
        assert self._control_engine is not None
        return self._control_engine

    def _control_sessionmaker(self) -> sessionmaker[Session]:
        with self._control_lock:
            if self._control_sessions is None:
                self._control_engine = make_engine(self.url, CONTROL_POOL_SIZE, CONTROL_MAX_OVERFLOW, self.schema)
                self._control_sessions = sessionmaker(self._control_engine, expire_on_commit=False)
            return self._control_sessions

    def dispose(self) -> None:
        self.engine.dispose()
        if self._control_engine is not None:
            self._control_engine.dispose()

    # -- migrations -------------------------------------------------------------------------------
    def migrate(self) -> None:
        """Upgrade to the newest revision. On PostgreSQL: one migration at a time across replicas, the
        schema (BATON_DATABASE_SCHEMA) created when missing, and a schema holding another application's
        tables (mula's, where OpenKAT's scheduler database is shared) refused before anything is written."""
        from alembic import command

        cfg = alembic_config()
        with self.engine.begin() as conn:
            if self.is_postgresql:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
                if self.schema:
                    conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {self.schema}"))
                refuse_foreign_tables(conn, self.address.describe())
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def migrations_current(self) -> bool:
        with translated(), self.engine.connect() as conn:
            return applied_revision(conn) == head_revision()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))


def alembic_config() -> AlembicConfig:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def applied_revision(conn: Connection) -> str | None:
    """The revision the database is at, read as alembic reads it; None before the first migration."""
    if not has_version_table(conn):
        return None
    rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:  # alembic refuses such a table too; Baton's history is one line
        raise ConfigurationError(f"{VERSION_TABLE} holds several revisions ({', '.join(rows)}); expected one")
    return rows[0] if rows else None


def has_version_table(conn: Connection) -> bool:
    """Whether alembic's table exists: one catalogue query, not SQLAlchemy's inspector (whose
    reflection queries every process would compile anew: 3 MiB of a forked child's own memory)."""
    if conn.dialect.name == "sqlite":
        found = conn.execute(
            text("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = :name"), {"name": VERSION_TABLE}
        ).scalar()
    else:  # PostgreSQL: resolved on the search path, as alembic's own lookup is
        found = conn.execute(text("SELECT to_regclass(:name) IS NOT NULL"), {"name": VERSION_TABLE}).scalar()
    return bool(found)


@cache
def head_revision() -> str:
    """The newest migration: the one revision no other script names as its `down_revision`.

    Read from the scripts' source (their module-level assignments) without importing alembic; a test
    checks it against alembic's own `ScriptDirectory.get_current_head()`.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        assigned = _module_constants(script)
        if "revision" not in assigned:
            continue
        revisions.add(str(assigned["revision"]))
        down = assigned.get("down_revision")
        parents.update((down,) if isinstance(down, str) else (down or ()))
    heads = sorted(revisions - parents)
    if len(heads) != 1:
        raise ConfigurationError(f"migrations in {MIGRATIONS_DIR} have {len(heads)} heads ({heads}); expected one")
    return heads[0]


def _module_constants(script: Path) -> dict[str, Any]:
    """`name = <literal>` and `name: type = <literal>` at a script's top level."""
    constants: dict[str, Any] = {}
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                constants[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):  # not a literal: not one alembic reads either
                continue
    return constants


def on_postgresql(session: Session | Connection) -> bool:
    """Which backend a session or connection talks to (the same test as `Store.is_postgresql`)."""
    return (
        session.get_bind().dialect.name == "postgresql"
        if isinstance(session, Session)
        else (session.dialect.name == "postgresql")
    )


def insert_for(session: Session | Connection) -> Any:
    """The dialect's INSERT construct, which knows ON CONFLICT."""
    return postgresql.insert if on_postgresql(session) else sqlite.insert


def describe_database(url: str, schema: str | None = None) -> str:
    try:
        return database_address(normalise_database_url(url), schema).describe()
    except ConfigurationError:
        return "the database"


def database_error(exc: DBAPIError | OSError, url: str, schema: str | None = None) -> ConfigurationError:
    """One line: which database could not be used, why, and which setting to check."""
    target = describe_database(url, schema)
    verb = "open" if target.startswith("SQLite") else "reach"
    hint = "check BATON_DATABASE_URL"
    if target.startswith("SQLite"):
        hint += " and that its directory exists and is writable"
    return ConfigurationError(f"cannot {verb} {target} ({reason(exc)}); {hint}")


def open_store(url: str, schema: str | None = None) -> Store:
    """A store whose database answers, or a ConfigurationError saying why not."""
    try:
        store = Store(url, schema)
        store.ping()
    except (DBAPIError, OSError) as exc:
        raise database_error(exc, url, schema) from exc
    return store


def open_store_when_reachable(url: str, retry_seconds: float = 1.0, schema: str | None = None) -> Store:
    """`open_store`, waiting out a database outage (reported to the process's tracker, so logged
    once, with the reason) instead of failing: for a director's child, which its director
    supervises. Exiting would cost it a restart, a fresh interpreter and the restart back-off. A
    URL that cannot work is still refused at once."""
    store = Store(url, schema)
    while True:
        seen = DATABASE.mark
        try:
            store.ping()
        except (DBAPIError, OSError) as exc:
            DATABASE.failed(seen, str(database_error(exc, url, schema)))
            time.sleep(retry_seconds)
            continue
        DATABASE.succeeded(seen)
        return store


def migrate_store(store: Store) -> None:
    """Migrate when the schema is not current (alembic, ~10 MiB of imports, only then: a replica
    starting on a current schema serves sooner)."""
    try:
        if not store.migrations_current():
            store.migrate()
    except (DBAPIError, OSError) as exc:
        raise database_error(exc, store.url, store.schema) from exc


def require_current_schema(store: Store) -> None:
    if not store.migrations_current():
        raise ConfigurationError(
            f"the database ({describe_database(store.url, store.schema)}) has no current schema; "
            "run `baton migrate` first (serve, director and worker do it themselves)"
        )
