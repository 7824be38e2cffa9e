"""What the database has beyond this release's tables, found by reflection: extra columns of
`schedulers` (a newer release's) and a `workers` table. The status page shows them as they are, and
reports missing ones as missing instead of failing. The lease columns (owner, term, lease expiry)
are this release's own: the status page shows them in words (`service/status/scheduler_views.py`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import MetaData, Table, func, select
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.orm import Session

from baton.core.views import TableSnapshot as TableSnapshot
from baton.storage.engine import Store
from baton.storage.tables import Scheduler

SCHEMA_SECONDS = 30.0  # how long a reflected schema is trusted
# Columns of `schedulers` this release models; any other (a newer release's) is shown as it is.
KNOWN_SCHEDULER_COLUMNS = frozenset(column.name for column in Scheduler.__table__.columns)


def plain(value: Any) -> Any:
    """A reflected value as JSON can carry it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, dict | list):
        return value
    return str(value)


@dataclass(frozen=True)
class ReflectedSchema:
    """The schema as last reflected, and the reads it allows (each in the caller's session)."""

    scheduler_extras: list[str]  # the extra columns of `schedulers`
    schedulers: Table | None  # reflected, when it has extra columns
    workers: Table | None

    def extra_columns(self, session: Session, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The extra columns of the schedulers `ids` (a page of them) by id ({} without any)."""
        if self.schedulers is None or not ids:
            return {}
        table, extras = self.schedulers, self.scheduler_extras
        rows = session.execute(select(table.c.id, *(table.c[name] for name in extras)).where(table.c.id.in_(list(ids))))
        return {row.id: {name: plain(getattr(row, name)) for name in extras} for row in rows}

    def workers_snapshot(self, session: Session, limit: int) -> TableSnapshot | None:
        """The first `limit` rows of `workers` by primary key; None: there is no such table."""
        table = self.workers
        if table is None:
            return None
        primary = list(table.primary_key.columns) or list(table.columns)[:1]
        rows = session.execute(select(table).order_by(*primary).limit(limit + 1)).all()
        columns = [column.name for column in table.columns]
        return TableSnapshot(
            name=table.name,
            columns=columns,
            rows=[{name: plain(value) for name, value in zip(columns, row, strict=True)} for row in rows[:limit]],
            truncated=len(rows) > limit,
        )

    def lease_owners(self, session: Session) -> list[tuple[str | None, int]]:
        """(owner, schedulers) per lease owner: one aggregate statement."""
        owner = Scheduler.owner
        rows = session.execute(select(owner, func.count()).group_by(owner))
        return [(None if value is None else str(value), int(count)) for value, count in rows]


class SchemaProbe:
    """Reflects the schema outside any session (SQLite allows one writer, and every session is one),
    again every SCHEMA_SECONDS."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._known_at = float("-inf")
        self._schema = ReflectedSchema([], None, None)

    def current(self) -> ReflectedSchema:
        with self._lock:
            if time.monotonic() - self._known_at >= SCHEMA_SECONDS:
                self._schema = self._reflect()
                self._known_at = time.monotonic()
            return self._schema

    def _reflect(self) -> ReflectedSchema:
        metadata = MetaData()
        schedulers = Table("schedulers", metadata, autoload_with=self.store.engine)
        extras = [column.name for column in schedulers.columns if column.name not in KNOWN_SCHEDULER_COLUMNS]
        try:
            workers: Table | None = Table("workers", metadata, autoload_with=self.store.engine)
        except NoSuchTableError:
            workers = None
        return ReflectedSchema(extras, schedulers if extras else None, workers)
