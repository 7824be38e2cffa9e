"""The events table: an inbox of events per scheduler, consumed in the transaction that handles them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from baton.core.model import utcnow
from baton.storage.tables import Event


def enqueue_event(session: Session, scheduler_id: str, kind: str, payload: dict[str, Any]) -> Event:
    row = Event(scheduler_id=scheduler_id, kind=kind, payload=payload)
    session.add(row)
    session.flush()
    return row


def claim_pending(session: Session, scheduler_id: str, limit: int) -> Sequence[Event]:
    """Unconsumed events of one scheduler, oldest first, locked with SKIP LOCKED: safe for
    competing consumers."""
    return session.scalars(
        select(Event)
        .where(Event.scheduler_id == scheduler_id, Event.consumed_at.is_(None))
        .order_by(Event.seq)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()


def mark_consumed(session: Session, row: Event) -> None:
    """The event is handled: consumed with the transaction that handled it (a rollback undoes it,
    and the event is delivered again)."""
    row.consumed_at = utcnow()
    session.add(row)
