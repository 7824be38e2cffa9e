"""Keyset pages of organisations and schedulers (= queues), and the estate's counts by aggregate SQL.

Each page is one range scan of an index, whatever the number of rows (migration 0011): organisations
by id, schedulers by (organisation, id). Keys compare byte by byte (`core.listing`): on PostgreSQL
with the "C" collation, whose indexes 0011 creates, so the order and a prefix search do not depend on
the database's locale; SQLite compares bytes anyway. A page reads `limit + 1` rows: one more than
shown says whether there is a next page, without counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, literal, or_, select
from sqlalchemy.orm import Session

from baton.core.heartbeat import CLAIMS_TO_RUN
from baton.core.listing import PageRequest, prefix_range
from baton.core.model import SchedulerState
from baton.core.views import EstateCounts as EstateCounts
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
    """Up to `limit + 1` organisations after `request.after` by id (backwards: before `request.before`,
    the nearest first)."""
    return session.scalars(organisations_statement(session, request)).all()


def organisations_statement(session: Session, request: PageRequest) -> Select[Organisation]:
    org_id = _bytewise(session, Organisation.id)
    conditions = _searched(session, Organisation.id, request)
    if request.after is not None:
        conditions.append(org_id > request.after[0])
    if request.before is not None:
        conditions.append(org_id < request.before[0])
    order = org_id.desc() if request.backwards else org_id
    return select(Organisation).where(*conditions).order_by(order).limit(request.limit + 1)


def _beyond(organisation: Any, scheduler_id: Any, key: tuple[str, ...], later: bool) -> ColumnElement[bool]:
    """(organisation, id) > key (`later`) or < key, as one index range on both backends: the bound on
    the organisation starts (or ends) the range, the rest drops the key's own organisation's rows up
    to the key (three at most). A plain OR of the two cases would be a filter over the whole index."""
    key_org, key_id = key
    if later:
        return and_(organisation >= key_org, or_(organisation > key_org, scheduler_id > key_id))
    return and_(organisation <= key_org, or_(organisation < key_org, scheduler_id < key_id))


def problem_condition(now: datetime, heartbeat_timeout: float) -> ColumnElement[bool]:
    """The heartbeat rule of `core.heartbeat` in SQL: failed, or claims to run without a heartbeat
    within the timeout (the later of the row's own and its lease holder's last renewal)."""
    holder = select(LeaseHolder.renewed_at).where(LeaseHolder.owner == Scheduler.owner)
    holder_beat = holder.correlate(Scheduler).scalar_subquery()
    cutoff = now - timedelta(seconds=heartbeat_timeout)
    quiet = and_(
        or_(Scheduler.written_heartbeat_at.is_(None), Scheduler.written_heartbeat_at < cutoff),
        or_(holder_beat.is_(None), holder_beat < cutoff),
    )
    claims = Scheduler.state.in_([state.value for state in CLAIMS_TO_RUN])
    return or_(Scheduler.state == SchedulerState.FAILED.value, and_(claims, quiet))


def schedulers_page(
    session: Session, request: PageRequest, problems: ColumnElement[bool] | None = None
) -> Sequence[Scheduler]:
    """Up to `limit + 1` schedulers after `request.after` = (organisation, id), by organisation, then
    id (backwards: before `request.before`, the nearest first); `problems`: only those it holds for
    (`problem_condition`)."""
    return session.scalars(schedulers_statement(session, request, problems)).all()


def schedulers_statement(
    session: Session, request: PageRequest, problems: ColumnElement[bool] | None = None
) -> Select[Scheduler]:
    organisation, scheduler_id = _bytewise(session, Scheduler.organisation), _bytewise(session, Scheduler.id)
    conditions = _searched(session, Scheduler.organisation, request)
    if request.after is not None:
        conditions.append(_beyond(organisation, scheduler_id, request.after, later=True))
    if request.before is not None:
        conditions.append(_beyond(organisation, scheduler_id, request.before, later=False))
    if problems is not None:
        conditions.append(problems)
    order = (organisation.desc(), scheduler_id.desc()) if request.backwards else (organisation, scheduler_id)
    return select(Scheduler).where(*conditions).order_by(*order).limit(request.limit + 1)


def schedulers_of(session: Session, organisations: Sequence[str]) -> Sequence[Scheduler]:
    """The schedulers (queues) of the given organisations, by organisation, then id."""
    if not organisations:
        return []
    query = select(Scheduler).where(Scheduler.organisation.in_(list(organisations)))
    return session.scalars(query.order_by(Scheduler.organisation, Scheduler.id)).all()


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


def estate_counts(session: Session, now: datetime, heartbeat_timeout: float) -> EstateCounts:
    """Counts by aggregate SQL, not by listing: organisations; schedulers by state as shown (the
    heartbeat rule of `core.heartbeat` in SQL: a scheduler that claims to run without a heartbeat
    within the timeout, the later of its own and its lease holder's, is failed), disabled and stale;
    queued and in-flight tasks summed from the counters."""
    organisations = int(session.scalar(select(func.count()).select_from(Organisation)) or 0)
    cutoff = now - timedelta(seconds=heartbeat_timeout)
    quiet = and_(
        or_(Scheduler.written_heartbeat_at.is_(None), Scheduler.written_heartbeat_at < cutoff),
        or_(LeaseHolder.renewed_at.is_(None), LeaseHolder.renewed_at < cutoff),
    )
    stale = and_(Scheduler.state.in_([state.value for state in CLAIMS_TO_RUN]), quiet)
    shown = case((stale, literal(SchedulerState.FAILED.value)), else_=Scheduler.state)
    rows = session.execute(
        select(
            shown, func.count(), func.sum(case((Scheduler.enabled, 0), else_=1)), func.sum(case((stale, 1), else_=0))
        )
        .select_from(Scheduler)
        .outerjoin(LeaseHolder, LeaseHolder.owner == Scheduler.owner)
        .group_by(shown)
    ).all()
    by_state = {str(state): int(count) for state, count, _, _ in rows}
    totals = session.execute(select(func.sum(QueueCounter.queued), func.sum(QueueCounter.in_flight))).one()
    return EstateCounts(
        organisations=organisations,
        schedulers=sum(by_state.values()),
        disabled=sum(int(disabled or 0) for _, _, disabled, _ in rows),
        by_state=by_state,
        stale=sum(int(count or 0) for _, _, _, count in rows),
        queued=int(totals[0] or 0),
        in_flight=int(totals[1] or 0),
    )


def queued_total(session: Session, organisation: str | None, kind: str | None) -> int:
    """Queued tasks of one organisation and/or type (None: any), summed from the counters."""
    query = select(func.coalesce(func.sum(QueueCounter.queued), 0)).join(
        Scheduler, Scheduler.id == QueueCounter.scheduler_id
    )
    if organisation is not None:
        query = query.where(Scheduler.organisation == organisation)
    if kind is not None:
        query = query.where(Scheduler.type == kind)
    return int(session.scalar(query) or 0)


def queue_ids(session: Session) -> list[str]:
    """Every queue's id (the search of a task by hash looks in each queue's hash index)."""
    return list(session.scalars(select(Scheduler.id)))
