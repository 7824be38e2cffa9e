"""The twin_checks table: boefje tasks made and not yet looked at for twins in other organisations. The
maker of boefje tasks writes them in the transaction that makes the tasks; the twin step reads an
organisation's oldest, then removes the ones it looked at in the transaction that writes their twins."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from baton.storage.engine import insert_for
from baton.storage.tables import Task, TwinCheck


@dataclass(frozen=True)
class PendingTwinCheck:
    """A task awaiting its twin check, as its task is now (None: the task is gone)."""

    task_id: uuid.UUID
    boefje_id: str
    scan_level: int
    input_ooi: str
    priority: int | None
    data: Mapping[str, Any] | None


def note_twin_checks(
    session: Session, organisation: str, checks: Sequence[tuple[uuid.UUID, str, int, str]], now: datetime
) -> None:
    """Record (task id, boefje id, boefje's scan level, object) of tasks just made, for their twin check."""
    if not checks:
        return
    session.execute(
        insert_for(session)(TwinCheck)
        .values(
            [
                {
                    "task_id": task_id,
                    "organisation": organisation,
                    "boefje_id": boefje_id,
                    "scan_level": scan_level,
                    "input_ooi": input_ooi,
                    "noted_at": now,
                }
                for task_id, boefje_id, scan_level, input_ooi in checks
            ]
        )
        .on_conflict_do_nothing(index_elements=[TwinCheck.task_id])
    )


def pending_twin_checks(session: Session, organisation: str, limit: int) -> list[PendingTwinCheck]:
    """The organisation's oldest `limit` checks, with their task's priority and data."""
    rows = session.execute(
        select(
            TwinCheck.task_id,
            TwinCheck.boefje_id,
            TwinCheck.scan_level,
            TwinCheck.input_ooi,
            Task.priority,
            Task.data,
        )
        .outerjoin(Task, Task.id == TwinCheck.task_id)
        .where(TwinCheck.organisation == organisation)
        .order_by(TwinCheck.noted_at, TwinCheck.task_id)
        .limit(limit)
    ).all()
    return [PendingTwinCheck(*row) for row in rows]


def has_twin_checks(session: Session, organisation: str) -> bool:
    """Whether any task of the organisation awaits its twin check."""
    found = session.scalar(select(TwinCheck.task_id).where(TwinCheck.organisation == organisation).limit(1))
    return found is not None


def drop_twin_checks(session: Session, task_ids: Collection[uuid.UUID]) -> None:
    if task_ids:
        session.execute(delete(TwinCheck).where(TwinCheck.task_id.in_(sorted(task_ids))))
