"""Organisations and their queues (one scheduler row per type)."""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.catalogue import AUTO_SOURCE
from baton.core.errors import ConflictError, NotFoundError
from baton.core.model import SchedulerState, SchedulerType, scheduler_id_for, utcnow
from baton.storage.engine import insert_for
from baton.storage.tables import Organisation, QueueCounter, Scheduler


def create_organisation(
    session: Session, org_id: str, name: str, maxsize: int, weight: int = 1, max_in_flight: int | None = None
) -> Organisation:
    """Create an organisation and its three queues."""
    if session.get(Organisation, org_id) is not None:
        raise ConflictError(f"organisation '{org_id}' already exists")
    now = utcnow()
    org = Organisation(id=org_id, name=name, created_at=now, weight=weight, max_in_flight=max_in_flight)
    session.add(org)
    for scheduler_type in SchedulerType:
        session.add(
            Scheduler(
                id=scheduler_id_for(scheduler_type, org_id),
                organisation=org_id,
                type=scheduler_type.value,
                maxsize=maxsize,
                enabled=True,
                state=SchedulerState.STOPPED.value,
                created_at=now,
            )
        )
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent create of the same id won the race
        raise ConflictError(f"organisation '{org_id}' already exists") from exc
    return org


def get_organisation(session: Session, org_id: str) -> Organisation:
    org = session.get(Organisation, org_id)
    if org is None:
        raise NotFoundError(f"organisation '{org_id}' not found")
    return org


def delete_organisation(session: Session, org_id: str) -> None:
    """Delete an organisation with its queues and tasks (foreign keys cascade), then its counters."""
    org = get_organisation(session, org_id)
    session.delete(org)
    session.flush()
    queue_ids = [scheduler_id_for(kind, org_id) for kind in SchedulerType]
    session.execute(delete(QueueCounter).where(QueueCounter.scheduler_id.in_(queue_ids)))


def set_fair_share(
    session: Session, org_id: str, weight: int | None, max_in_flight: int | None, *, cap_given: bool
) -> Organisation:
    org = get_organisation(session, org_id)
    if weight is not None:
        org.weight = weight
    if cap_given:
        org.max_in_flight = max_in_flight
    return org


def ensure_organisation(session: Session, org_id: str, maxsize: int, source: str | None = None) -> bool:
    """Create the organisation and its queues unless they exist (safe under concurrency: ON CONFLICT
    DO NOTHING). `source`: where a new one came from (None: made in Baton). True when this call
    created it."""
    now = utcnow()
    insert = insert_for(session)
    created = session.execute(
        insert(Organisation)
        .values(id=org_id, name=org_id, created_at=now, weight=1, source=source)
        .on_conflict_do_nothing(index_elements=[Organisation.id])
        .returning(Organisation.id)
    ).first()
    session.execute(
        insert(Scheduler)
        .values(
            [
                {
                    "id": scheduler_id_for(kind, org_id),
                    "organisation": org_id,
                    "type": kind.value,
                    "maxsize": maxsize,
                    "enabled": True,
                    "state": SchedulerState.STOPPED.value,
                    "created_at": now,
                }
                for kind in SchedulerType
            ]
        )
        .on_conflict_do_nothing(index_elements=[Scheduler.id])
    )
    return created is not None


def adopt_organisation(session: Session, org_id: str, *, auto: bool, maxsize: int) -> bool:
    """The rule for an organisation a push, a schedule or a message names (OpenKAT announces none):
    with BATON_AUTO_ORGANISATIONS (`auto`) it is created, with its queues (`maxsize`), when first named. True when it
    exists afterwards."""
    if auto:
        ensure_organisation(session, org_id, maxsize, source=AUTO_SOURCE)
        return True
    return session.get(Organisation, org_id) is not None
