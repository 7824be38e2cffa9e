"""Report schedules: cron expressions per organisation, and claiming the ones that are due."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from baton.core.errors import NotFoundError
from baton.core.model import utcnow
from baton.storage.organisations import get_organisation
from baton.storage.tables import ReportSchedule


def create_schedule(
    session: Session, organisation: str, cron: str, data: dict[str, Any], enabled: bool, next_run_at: datetime
) -> ReportSchedule:
    get_organisation(session, organisation)
    schedule = ReportSchedule(
        id=uuid.uuid4(),
        organisation=organisation,
        cron=cron,
        data=data,
        enabled=enabled,
        next_run_at=next_run_at,
        created_at=utcnow(),
    )
    session.add(schedule)
    session.flush()
    return schedule


def list_schedules(session: Session, organisation: str) -> Sequence[ReportSchedule]:
    get_organisation(session, organisation)
    return session.scalars(
        select(ReportSchedule).where(ReportSchedule.organisation == organisation).order_by(ReportSchedule.created_at)
    ).all()


def delete_schedule(session: Session, organisation: str, schedule_id: uuid.UUID) -> None:
    row = session.get(ReportSchedule, schedule_id)
    if row is None or row.organisation != organisation:
        raise NotFoundError(f"report schedule '{schedule_id}' not found in organisation '{organisation}'")
    session.delete(row)


def claim_due(session: Session, organisation: str, now: datetime, limit: int) -> Sequence[ReportSchedule]:
    """Due, enabled schedules of an organisation, locked (SKIP LOCKED) for this transaction."""
    return session.scalars(
        select(ReportSchedule)
        .where(
            ReportSchedule.organisation == organisation,
            ReportSchedule.enabled.is_(True),
            ReportSchedule.next_run_at <= now,
        )
        .order_by(ReportSchedule.next_run_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
