"""Who leads, as reported by the leader each round (for /metrics, the status page and failover
measurements; the election itself is a lock or a lease)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from baton.core.model import utcnow
from baton.storage.tables import LeaderRecord


def record_leadership(session: Session, role: str, holder: str) -> None:
    now = utcnow()
    row = session.get(LeaderRecord, role)
    if row is None:
        session.add(LeaderRecord(role=role, holder=holder, acquired_at=now, renewed_at=now))
        return
    if row.holder != holder:
        row.holder = holder
        row.acquired_at = now
    row.renewed_at = now


def leaders(session: Session) -> Sequence[LeaderRecord]:
    return session.scalars(select(LeaderRecord).order_by(LeaderRecord.role)).all()
