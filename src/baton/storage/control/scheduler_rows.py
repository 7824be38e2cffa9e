"""Scheduler rows: each is a queue's settings and its scheduler's live state (heartbeat)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from baton.core.errors import NotFoundError
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType, utcnow
from baton.storage.tables import Organisation, Scheduler


def get_scheduler(session: Session, scheduler_id: str) -> Scheduler:
    row = session.get(Scheduler, scheduler_id)
    if row is None:
        raise NotFoundError(f"queue '{scheduler_id}' not found")
    return row


def set_enabled(session: Session, scheduler_id: str, enabled: bool) -> Scheduler:
    row = get_scheduler(session, scheduler_id)
    row.enabled = enabled
    return row


def all_specs(session: Session) -> set[SchedulerSpec]:
    """Every scheduler that should run: one per scheduler row of an existing organisation that is not
    retired (storage/control/organisation_sync.py)."""
    rows = session.execute(
        select(Scheduler.organisation, Scheduler.type)
        .join(Organisation, Organisation.id == Scheduler.organisation)
        .where(Organisation.retired_at.is_(None))
    ).all()
    return {SchedulerSpec(organisation, SchedulerType(kind)) for organisation, kind in rows}


def heartbeats(session: Session, ids: set[str]) -> list[tuple[str, datetime | None, SchedulerState]]:
    rows = session.execute(
        select(Scheduler.id, Scheduler.heartbeat_at, Scheduler.state).where(Scheduler.id.in_(ids))
    ).all()
    return [(scheduler_id, heartbeat_at, SchedulerState(state)) for scheduler_id, heartbeat_at, state in rows]


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
