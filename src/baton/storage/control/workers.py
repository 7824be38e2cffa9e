"""The `workers` rows of worker mode: who is in the pool, and when a peer's lease runs out next."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, case, delete, exists, func, select, update
from sqlalchemy.orm import Session

from baton.storage.clock import db_after, db_now, db_now_once
from baton.storage.engine import insert_for
from baton.storage.tables import IS_RETIRED, LeaseHolder, Organisation, Scheduler, WorkerRecord


def heartbeat_worker(session: Session, worker_id: str, lease_seconds: float) -> None:
    now, until = db_now(session), db_after(session, lease_seconds)
    updated = session.execute(
        update(WorkerRecord)
        .where(WorkerRecord.id == worker_id)
        .values(heartbeat_at=now, expires_at=until)
        .returning(WorkerRecord.id)
    ).scalar()
    if updated is None:
        session.execute(
            insert_for(session)(WorkerRecord).values(id=worker_id, started_at=now, heartbeat_at=now, expires_at=until)
        )


def live_workers(session: Session) -> list[str]:
    """Workers whose row runs and whose scheduler leases have not ended (their lease-holder row, and
    the leases of claims made before it). A running worker renews its leases every retry period, long
    before they end (the renew deadline comes first), so one that let them end has died or is frozen:
    its peers count it out then and take over its share, not up to a round later when its own row
    ends. It reads the few holder rows, not the schedulers' rows."""
    now = db_now(session)
    holder_ends = select(LeaseHolder.expires_at).where(LeaseHolder.owner == WorkerRecord.id).scalar_subquery()
    # Before its first renewal a worker's leases are its claims' own.
    lapsed_claim = exists().where(Scheduler.owner == WorkerRecord.id, Scheduler.written_lease_expires_at <= now)
    leased = case((holder_ends.is_not(None), holder_ends > now), else_=~lapsed_claim)
    return list(
        session.scalars(select(WorkerRecord.id).where(WorkerRecord.expires_at > now, leased).order_by(WorkerRecord.id))
    )


def remove_worker(session: Session, worker_id: str) -> None:
    session.execute(delete(WorkerRecord).where(WorkerRecord.id == worker_id))


def peer_lease_ends(session: Session, owner: str) -> Select[datetime, datetime | None, datetime, datetime]:
    """The first end of a peer's lease of each kind (holder row, a claim's own, worker row) and the
    database's clock. Bounded by the clock read once (`db_now_once`): the claims' leases are read from
    their index, the few still running, not every row a worker ever claimed (an idle worker sends
    this every round; at 30,000 schedulers the volatile clock made it a 13 ms scan each time)."""
    now = db_now_once(session)
    holder_end = select(func.min(LeaseHolder.expires_at)).where(
        LeaseHolder.owner != owner, LeaseHolder.expires_at > now
    )
    # Claims' own leases (from the index on them): they outlast the holder's only just after a claim.
    claim_end = select(func.min(Scheduler.written_lease_expires_at)).where(
        Scheduler.written_lease_expires_at > now, Scheduler.owner.is_not(None), Scheduler.owner != owner
    )
    worker_end = select(func.min(WorkerRecord.expires_at)).where(
        WorkerRecord.id != owner, WorkerRecord.expires_at > now
    )
    return select(holder_end.scalar_subquery(), claim_end.scalar_subquery(), worker_end.scalar_subquery(), now)


def seconds_until_a_peer_lease_ends(session: Session, owner: str) -> float | None:
    """How soon the next lease of someone else runs out, a scheduler's or a worker's own, on the
    database's clock; None when no one else holds one that is still running. A worker's share grows
    when a peer's row ends, and it may claim a scheduler once the scheduler's lease has ended."""
    first_holder, first_claim, first_worker, now_then = session.execute(peer_lease_ends(session, owner)).one()
    ends = [end for end in (first_holder, first_claim, first_worker) if end is not None]
    return (min(ends) - now_then).total_seconds() if ends else None


def count_schedulers(session: Session) -> int:
    """Every scheduler that should run: the scheduler rows (each belongs to an existing organisation: the
    foreign key cascades its deletion, on both backends) less those of retired organisations, read from
    their own index; without joining every organisation: an idle worker counts every round."""
    everything = select(func.count()).select_from(Scheduler).scalar_subquery()
    retired = (
        select(func.count())
        .select_from(Scheduler)
        .where(Scheduler.organisation.in_(select(Organisation.id).where(IS_RETIRED)))
        .scalar_subquery()
    )
    return int(session.scalar(select(everything - retired)) or 0)
