"""Schedules: when to create a task again (OpenKAT's schedules; report schedules are among them)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, exists, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.errors import ConflictError, NotFoundError
from baton.core.model import TaskStatus, utcnow
from baton.core.views import ScheduleQuery as ScheduleQuery
from baton.storage.control.organisations import get_organisation
from baton.storage.filters import SCHEDULES, compile_tree
from baton.storage.tables import Schedule, Task


def create_schedule(
    session: Session,
    *,
    scheduler_id: str,
    organisation: str,
    data: dict[str, Any],
    schedule: str | None,
    deadline_at: datetime | None,
    schedule_hash: str | None,
    enabled: bool = True,
) -> Schedule:
    get_organisation(session, organisation)
    if schedule_hash is not None and session.scalar(select(Schedule.id).where(Schedule.hash == schedule_hash)):
        raise ConflictError(f"schedule with the same hash already exists: {schedule_hash}")
    now = utcnow()
    row = Schedule(
        id=uuid.uuid4(),
        scheduler_id=scheduler_id,
        organisation=organisation,
        hash=schedule_hash,
        data=data,
        enabled=enabled,
        schedule=schedule,
        deadline_at=deadline_at,
        created_at=now,
        modified_at=now,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent create of the same hash won the race
        raise ConflictError(f"schedule with the same hash already exists: {schedule_hash}") from exc
    return row


def get_schedule(session: Session, schedule_id: uuid.UUID) -> Schedule:
    row = session.get(Schedule, schedule_id)
    if row is None:
        raise NotFoundError(f"schedule not found, by schedule_id: {schedule_id}")
    return row


def _conditions(session: Session, query: ScheduleQuery) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    equal: list[tuple[Any, Any]] = [
        (Schedule.scheduler_id, query.scheduler_id),
        (Schedule.organisation, query.organisation),
        (Schedule.hash, query.hash),
        (Schedule.enabled, query.enabled),
    ]
    conditions.extend(column == value for column, value in equal if value is not None)
    ranges: list[tuple[Any, datetime | None, datetime | None]] = [
        (Schedule.deadline_at, query.min_deadline_at, query.max_deadline_at),
        (Schedule.created_at, query.min_created_at, query.max_created_at),
    ]
    for column, low, high in ranges:
        if low is not None:
            conditions.append(column >= low)
        if high is not None:
            conditions.append(column <= high)
    if query.matching is not None:
        conditions.append(compile_tree(query.matching, session.get_bind().dialect.name, SCHEDULES))
    return conditions


def list_schedules(
    session: Session, query: ScheduleQuery = ScheduleQuery(), *, limit: int = 100, offset: int = 0
) -> tuple[int, Sequence[Schedule]]:
    """A page of schedules, newest first, and how many match in all."""
    conditions = _conditions(session, query)
    count = session.scalar(select(func.count()).select_from(Schedule).where(*conditions)) or 0
    rows = session.scalars(
        select(Schedule).where(*conditions).order_by(Schedule.created_at.desc()).limit(limit).offset(offset)
    ).all()
    return count, rows


def update_schedule(session: Session, schedule_id: uuid.UUID, changes: Mapping[str, Any]) -> Schedule:
    row = get_schedule(session, schedule_id)
    for key, value in changes.items():
        setattr(row, key, value)
    if "enabled" in changes:  # a person decided: the rescans' reason no longer holds
        row.disabled_reason = row.disabled_detail = None
    row.modified_at = utcnow()
    try:
        session.flush()
    except IntegrityError as exc:
        raise ConflictError(f"schedule with the same hash already exists: {changes.get('hash')}") from exc
    return row


def delete_schedule(
    session: Session, schedule_id: uuid.UUID, *, organisation: str | None = None, scheduler_id: str | None = None
) -> bool:
    """Delete the schedule (when given: only of that organisation and scheduler); False if there is none such."""
    row = session.get(Schedule, schedule_id)
    if row is None or organisation not in (None, row.organisation) or scheduler_id not in (None, row.scheduler_id):
        return False
    session.delete(row)
    return True


def claim_due(
    session: Session, scheduler_id: str, organisation: str, now: datetime, limit: int, *, queue: str | None = None
) -> Sequence[Schedule]:
    """Enabled schedules of one scheduler and organisation whose deadline passed, locked with SKIP
    LOCKED for this transaction (two schedulers never fire one schedule twice). With `queue`: not those
    whose task (by the schedule's hash) is still queued there, which wait, deadline kept, for it to leave."""
    conditions = [
        Schedule.scheduler_id == scheduler_id,
        Schedule.organisation == organisation,
        Schedule.enabled.is_(True),
        Schedule.deadline_at <= now,
    ]
    if queue is not None:
        queued = exists().where(
            Task.scheduler_id == queue, Task.hash == Schedule.hash, Task.status == TaskStatus.QUEUED.value
        )
        conditions.append(~queued)
    return session.scalars(
        select(Schedule)
        .where(*conditions)
        .order_by(Schedule.deadline_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
