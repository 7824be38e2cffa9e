"""Organisations as KATalogus lists them: those the KATalogus sync created (`organisations.source`), the
ones it adds, the ones it retires (KATalogus no longer lists them) and brings back.

A retired organisation (`retired_at` set) is kept, with its queues, tasks and schedules, all readable:
its schedulers do not run (the director and the workers leave them out, storage/control/scheduler_rows.py and
scheduler_leases.py), so its schedules do not fire; its queues take no push (as a disabled queue);
and `settle_retired` leaves it nothing to hand out: its queued tasks are cancelled and its schedulers'
claims revoked, at retirement and again in every housekeeping round (for a task that came back to
its queue since: a push that raced the retirement, a runner handing one back). Nothing here deletes."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from baton.core.catalogue import AUTO_SOURCE, KATALOGUS_SOURCE, RETIRED_TASK_REASON
from baton.core.model import TaskStatus
from baton.storage.control.organisations import ensure_organisation
from baton.storage.control.pool_changes import announce_pool_change
from baton.storage.control.scheduler_leases import revoke_retired_claims
from baton.storage.tables import IS_QUEUED, IS_RETIRED, Organisation, Scheduler, Task


def organisation_ids(session: Session, source: str | None = None) -> set[str]:
    """Every organisation's id, or those of one `source` ("katalogus")."""
    query = select(Organisation.id)
    if source is not None:
        query = query.where(Organisation.source == source)
    return set(session.scalars(query))


def add_katalogus_organisation(session: Session, org_id: str, name: str, maxsize: int) -> bool:
    """Create the organisation (and its queues) as KATalogus' own, unless one of that id exists (made in
    Baton: it stays Baton's, never removed by the sync). True when this call created it."""
    created = ensure_organisation(session, org_id, maxsize, source=KATALOGUS_SOURCE)
    if created:
        session.execute(update(Organisation).where(Organisation.id == org_id).values(name=name))
    return created


def adopt_auto_organisations(session: Session, listed: Collection[str]) -> list[str]:
    """Organisations made automatically (a message or a push named them before the sync saw them) that
    KATalogus lists become KATalogus' own: removed when it drops them. Those made through the API or an
    organisation message stay Baton's."""
    if not listed:
        return []
    adopted = session.scalars(
        update(Organisation)
        .where(Organisation.source == AUTO_SOURCE, Organisation.id.in_(sorted(listed)))
        .values(source=KATALOGUS_SOURCE)
        .returning(Organisation.id)
    )
    return sorted(adopted)


def retired_ids(session: Session) -> set[str]:
    return set(session.scalars(select(Organisation.id).where(IS_RETIRED)))


def retire_organisations(session: Session, org_ids: Collection[str], now: datetime) -> list[str]:
    """Retire these organisations (those not retired yet), then settle them: nothing is deleted. The
    ids retired."""
    if not org_ids:
        return []
    retired = sorted(
        session.scalars(
            update(Organisation)
            .where(Organisation.id.in_(sorted(org_ids)), Organisation.retired_at.is_(None))
            .values(retired_at=now)
            .returning(Organisation.id)
        )
    )
    if retired:
        settle_retired(session, now)
        announce_pool_change(session)  # workers count their schedulers out now
    return retired


def restore_organisations(session: Session, org_ids: Collection[str]) -> list[str]:
    """Bring these retired organisations back, with their tasks and schedules: their schedulers run
    again (claimed by the director or a worker), their queues take tasks. The ids restored."""
    if not org_ids:
        return []
    restored = sorted(
        session.scalars(
            update(Organisation)
            .where(Organisation.id.in_(sorted(org_ids)), IS_RETIRED)
            .values(retired_at=None)
            .returning(Organisation.id)
        )
    )
    if restored:
        announce_pool_change(session)
    return restored


def settle_retired(session: Session, now: datetime) -> tuple[int, int]:
    """Leave retired organisations nothing to hand out and nothing running: their queued tasks are
    cancelled (with the reason) and their schedulers' claims revoked (whoever runs one stops). The
    retired organisations (usually none) are read first, from their own index, and nothing else is
    done without one: a housekeeping round runs this every few seconds, and the statements with the
    retired set as a subquery were sometimes planned to scan every held scheduler row once per held
    row (seconds of PostgreSQL's CPU per round at 30,000 schedulers). (cancelled, revoked)."""
    retired = sorted(retired_ids(session))
    if not retired:
        return 0, 0
    retired_queues = select(Scheduler.id).where(Scheduler.organisation.in_(retired))
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(Task)
        .where(IS_QUEUED, Task.scheduler_id.in_(retired_queues.scalar_subquery()))
        .values(status=TaskStatus.CANCELLED.value, modified_at=now, reason=RETIRED_TASK_REASON)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0), revoke_retired_claims(session, retired)
