"""What the container probes (`baton probe`) read: the director's leadership renewal and the heartbeats
of this host's workers. Each read uses one short connection of its own, not a Store: read-only on
SQLite (a probe never creates or writes baton.db), read-only transactions on PostgreSQL, and at most 3 s
to connect there, so a probe answers within its timeout whatever the database does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Connection, create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from baton.core.diagnosis import reason
from baton.core.errors import BatonError
from baton.core.settings import normalise_database_url
from baton.storage.control.leadership import DIRECTOR_ROLE
from baton.storage.tables import LeaderRecord, WorkerRecord
from baton.storage.urls import database_address

CONNECT_TIMEOUT_SECONDS = 3


class DatabaseUnreachableError(BatonError):
    """The database did not answer a probe's read (or holds no Baton schema); the message says why."""


@dataclass(frozen=True)
class Renewal:
    holder: str
    renewed_at: datetime


@contextmanager
def read_only_connection(url: str, schema: str | None, application: str = "baton probe") -> Iterator[Connection]:
    """One connection that writes nothing (SQLite opened read-only; never a new file); a database that
    does not answer is a DatabaseUnreachableError."""
    address = database_address(normalise_database_url(url), schema)
    if address.backend == "sqlite":
        target = f"sqlite:///file:{make_url(address.url).database}?mode=ro&uri=true"
        engine = create_engine(target, poolclass=NullPool, connect_args={"timeout": CONNECT_TIMEOUT_SECONDS})
    else:  # Baton's one connection string (storage/urls.py), BATON_DATABASE_SCHEMA included

        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(
                address.conninfo,
                options=address.options_with("-c default_transaction_read_only=on"),
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name=application,
            )

        engine = create_engine("postgresql+psycopg://", poolclass=NullPool, creator=connect)
    try:
        with engine.connect() as connection:
            yield connection
    except SQLAlchemyError as exc:
        raise DatabaseUnreachableError(reason(exc)) from exc
    finally:
        engine.dispose()


def director_renewal(url: str, schema: str | None = None) -> Renewal | None:
    """Who holds the director's leadership row and when they last renewed it (None: nobody yet)."""
    with read_only_connection(url, schema) as connection:
        row = connection.execute(
            select(LeaderRecord.holder, LeaderRecord.renewed_at).where(LeaderRecord.role == DIRECTOR_ROLE)
        ).first()
    return None if row is None else Renewal(row.holder, row.renewed_at)


def worker_heartbeats(url: str, host: str, schema: str | None = None) -> list[datetime]:
    """The last heartbeat of every worker row registered from `host` (ids are `host:pid#...`)."""
    with read_only_connection(url, schema) as connection:
        return list(
            connection.scalars(
                select(WorkerRecord.heartbeat_at).where(WorkerRecord.id.startswith(f"{host}:", autoescape=True))
            )
        )
