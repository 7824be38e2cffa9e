"""Removing finished tasks past their retention, and the consumed events of a scheduler's inbox, a
small batch per transaction.

Each batch is one statement: the oldest `limit` finished tasks last changed before the cutoff,
read in order from `ix_tasks_modified` (old tasks are almost all finished, so few are skipped) and
locked with SKIP LOCKED (a task an operator holds at that moment is left for a later batch, and two
removers never wait on each other), then deleted by primary key. Pops and pushes touch queued and
in-flight tasks only, never these rows; the counters' delete trigger ignores finished tasks
(migration 0008), so a batch writes nothing but the rows it removes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, Select, delete, select
from sqlalchemy.orm import Session

from baton.core.retention import FINISHED
from baton.storage.tables import Event, Task


def delete_finished(session: Session, before: datetime, limit: int) -> int:
    """Delete up to `limit` finished tasks last changed before `before`, oldest first; how many."""
    oldest = (
        select(Task.seq)
        .where(Task.status.in_([status.value for status in FINISHED]), Task.modified_at < before)
        .order_by(Task.modified_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return _delete_rows(session, Task, oldest)


def delete_consumed_events(session: Session, before: datetime, limit: int) -> int:
    """Delete up to `limit` inbox events consumed (made into tasks, or rejected as dead letters) before
    `before`, oldest first; how many. Unconsumed events are never removed, however old."""
    oldest = (
        select(Event.seq)
        .where(Event.consumed_at.is_not(None), Event.consumed_at < before)
        .order_by(Event.seq)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return _delete_rows(session, Event, oldest)


def _delete_rows(session: Session, table: type[Task] | type[Event], seqs: Select[Any]) -> int:
    """Delete the rows of `table` whose `seq` the select picks (locked, skipping locked ones); how many."""
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(table).where(table.seq.in_(seqs.scalar_subquery())),
        execution_options={"synchronize_session": False},
    )
    return int(result.rowcount or 0)
