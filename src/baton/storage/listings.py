"""Keyset pages of organisations and schedulers (= queues), and the estate's counts by aggregate SQL.

Each page is one range scan of an index, whatever the number of rows (migration 0013): organisations
by id, schedulers by (organisation, id). Keys compare byte by byte (`core.listing`): on PostgreSQL
with the "C" collation, whose indexes 0013 creates, so the order and a prefix search do not depend on
the database's locale; SQLite compares bytes anyway. A page reads `limit + 1` rows: one more than
shown says whether there is a next page, without counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, literal, or_, select
from sqlalchemy.orm import Session

from baton.core.heartbeat import CLAIMS_TO_RUN
from baton.core.listing import PageRequest, prefix_range
from baton.storage.engine import on_postgresql
from baton.storage.tables import LeaseHolder, Organisation, QueueCounter, Scheduler


def _bytewise(session: Session, column: Any) -> Any:
    """The column compared byte by byte: PostgreSQL's "C" collation (SQLite's default already)."""
    return column.collate("C") if on_postgresql(session) else column


def _searched(session: Session, column: Any, request: PageRequest) -> list[ColumnElement[bool]]:
    """The search by organisation, on `column` (an organisation id)."""
    conditions: list[ColumnElement[bool]] = []
    if request.organisation is not None:
        conditions.append(column == request.organisation)
    if request.prefix is not None:
        low, high = prefix_range(request.prefix)
        ordered = _bytewise(session, column)
        conditions += [ordered >= low, ordered < high]
    return conditions


def organisations_page(session: Session, request: PageRequest) -> Sequence[Organisation]:
    """Up to `limit + 1` organisations after `request.after`, by id."""
    org_id = _bytewise(session, Organisation.id)
    conditions = _searched(session, Organisation.id, request)
    if request.after is not None:
        conditions.append(org_id > request.after[0])
    query = select(Organisation).where(*conditions).order_by(org_id).limit(request.limit + 1)
    return session.scalars(query).all()


def schedulers_page(session: Session, request: PageRequest) -> Sequence[Scheduler]:
    """Up to `limit + 1` schedulers after `request.after` = (organisation, id), by organisation, then id."""
    organisation, scheduler_id = _bytewise(session, Scheduler.organisation), _bytewise(session, Scheduler.id)
    conditions = _searched(session, Scheduler.organisation, request)
    if request.after is not None:
        after_org, after_id = request.after
        # (organisation, id) > (a, b), spelt out: both backends turn it into one index range.
        conditions.append(
            or_(organisation > after_org, and_(organisation == literal(after_org), scheduler_id > after_id))
        )
    query = select(Scheduler).where(*conditions).order_by(organisation, scheduler_id).limit(request.limit + 1)
    return session.scalars(query).all()


def counts_of(session: Session, queue_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """(queued, in flight) of the given queues, from the counters: one probe per queue."""
    if not queue_ids:
        return {}
    rows = session.execute(
        select(QueueCounter.scheduler_id, func.sum(QueueCounter.queued), func.sum(QueueCounter.in_flight))
        .where(QueueCounter.scheduler_id.in_(list(queue_ids)))
        .group_by(QueueCounter.scheduler_id)
    )
    return {scheduler_id: (int(queued or 0), int(in_flight or 0)) for scheduler_id, queued, in_flight in rows}


@dataclass(frozen=True)
class EstateCounts:
    """The whole estate in a few numbers, each from one aggregate statement."""

    organisations: int
    schedulers: int
    disabled: int
    by_state: dict[str, int]  # as the rows say
    stale: int  # claim to run without a heartbeat within the timeout (shown failed)
    queued: int
    in_flight: int


def estate_counts(session: Session, now: datetime, heartbeat_timeout: float) -> EstateCounts:
    """Counts by aggregate SQL, not by listing: organisations; schedulers by state, disabled and stale
    (the heartbeat rule of `core.heartbeat`, in SQL: the later of the row's own heartbeat and its lease
    holder's last renewal); queued and in-flight tasks summed from the counters."""
    organisations = int(session.scalar(select(func.count()).select_from(Organisation)) or 0)
    beat = func.coalesce(
        case(
            (LeaseHolder.renewed_at > Scheduler.written_heartbeat_at, LeaseHolder.renewed_at),
            else_=Scheduler.written_heartbeat_at,
        ),
        LeaseHolder.renewed_at,
    )
    overdue = or_(beat.is_(None), beat < now - timedelta(seconds=heartbeat_timeout))
    claims = Scheduler.state.in_([state.value for state in CLAIMS_TO_RUN])
    rows = session.execute(
        select(
            Scheduler.state,
            func.count(),
            func.sum(case((Scheduler.enabled, 0), else_=1)),
            func.sum(case((and_(claims, overdue), 1), else_=0)),
        )
        .select_from(Scheduler)
        .outerjoin(LeaseHolder, LeaseHolder.owner == Scheduler.owner)
        .group_by(Scheduler.state)
    ).all()
    by_state = {str(state): int(count) for state, count, _, _ in rows}
    totals = session.execute(select(func.sum(QueueCounter.queued), func.sum(QueueCounter.in_flight))).one()
    return EstateCounts(
        organisations=organisations,
        schedulers=sum(by_state.values()),
        disabled=sum(int(disabled or 0) for _, _, disabled, _ in rows),
        by_state=by_state,
        stale=sum(int(stale or 0) for _, _, _, stale in rows),
        queued=int(totals[0] or 0),
        in_flight=int(totals[1] or 0),
    )
