"""The outside_services table: whether KATalogus, Octopoes and Bytes answer, as whoever calls them last
said, so every process (an API replica's /ready and /metrics, the status page) can read it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from baton.storage.engine import insert_for
from baton.storage.tables import OutsideService


@dataclass(frozen=True)
class OutsideServiceState:
    service: str
    down_since: datetime | None  # None: it answered the last call
    reason: str | None
    checked_at: datetime  # when a caller last recorded the state

    @property
    def down(self) -> bool:
        return self.down_since is not None


def record_outside_service(
    session: Session, service: str, down_since: datetime | None, reason: str | None, now: datetime
) -> None:
    """The service's state as a caller sees it now (an outage keeps its first `down_since`)."""
    stmt = insert_for(session)(OutsideService).values(
        service=service, down_since=down_since, reason=reason, checked_at=now
    )
    # Another process may have seen the outage begin first: the earlier start stays.
    kept_start = case(
        (stmt.excluded.down_since.is_(None), None),
        else_=func.coalesce(OutsideService.down_since, stmt.excluded.down_since),
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[OutsideService.service],
            set_={"down_since": kept_start, "reason": stmt.excluded.reason, "checked_at": now},
        )
    )


def outside_services(session: Session) -> list[OutsideServiceState]:
    """Every service a caller recorded, by name: a service Baton never called has no row."""
    rows = session.scalars(select(OutsideService).order_by(OutsideService.service))
    return [OutsideServiceState(row.service, row.down_since, row.reason, row.checked_at) for row in rows]
