"""Who leads, as reported by the leader each round (for /metrics, the status page and failover
measurements; the election itself is a lock or a lease)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from baton.storage.tables import LeaderRecord


def leaders(session: Session) -> Sequence[LeaderRecord]:
    return session.scalars(select(LeaderRecord).order_by(LeaderRecord.role)).all()
