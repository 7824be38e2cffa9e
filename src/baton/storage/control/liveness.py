"""What the container probes (`baton probe`) read: the director's leadership renewal and the heartbeats
of this host's workers. Each read uses one short connection of its own, not a Store: read-only on
SQLite (a probe never creates or writes baton.db) and at most 3 s to connect on PostgreSQL, so a
probe answers within its timeout whatever the database does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from baton.core.diagnosis import reason
from baton.core.errors import BatonError
from baton.core.settings import normalise_database_url
from baton.storage.control.leadership import DIRECTOR_ROLE
from baton.storage.tables import LeaderRecord, WorkerRecord

CONNECT_TIMEOUT_SECONDS = 3


class DatabaseUnreachableError(BatonError):
    """The database did not answer a probe's read (or holds no Baton schema); the message says why."""


@dataclass(frozen=True)
class Renewal:
    holder: str
    renewed_at: datetime


@contextmanager
def _read_only(url: str) -> Iterator[Connection]:
    parsed = make_url(normalise_database_url(url))
    if parsed.get_backend_name() == "sqlite":
        target = f"sqlite:///file:{parsed.database}?mode=ro&uri=true"
        engine = create_engine(target, poolclass=NullPool, connect_args={"timeout": CONNECT_TIMEOUT_SECONDS})
    else:
        connect_args = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, "application_name": "baton probe"}
        engine = create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as connection:
            yield connection
    except SQLAlchemyError as exc:
        raise DatabaseUnreachableError(reason(exc)) from exc
    finally:
        engine.dispose()


def director_renewal(url: str) -> Renewal | None:
    """Who holds the director's leadership row and when they last renewed it (None: nobody yet)."""
    with _read_only(url) as connection:
        row = connection.execute(
            select(LeaderRecord.holder, LeaderRecord.renewed_at).where(LeaderRecord.role == DIRECTOR_ROLE)
        ).first()
    return None if row is None else Renewal(row.holder, row.renewed_at)


def worker_heartbeats(url: str, host: str) -> list[datetime]:
    """The last heartbeat of every worker row registered from `host` (ids are `host:pid#...`)."""
    with _read_only(url) as connection:
        return list(
            connection.scalars(
                select(WorkerRecord.heartbeat_at).where(WorkerRecord.id.startswith(f"{host}:", autoescape=True))
            )
        )
