"""Leadership: who leads (the director role), as a lease row per role.

The holder renews its `leaders` row; anyone may take it over by a conditional UPDATE once it has
expired, and every takeover increments the term. A frozen holder keeps its connection but cannot
renew, so the lease ends in bounded time (the lease runs on the database's clock, storage/clock.py).
An elector outside the database (a Kubernetes Lease) reports who leads in the same row, for the
API, /metrics and the status page.

On PostgreSQL the holder also keeps a `LivenessLock`: a fast signal that its connection died
(control/leadership.py explains how the elector uses it; safety never rests on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, exists, func, literal, or_, select, text, true, update
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session

from baton.core.model import utcnow
from baton.core.views import Leadership as Leadership
from baton.storage.clock import db_after, db_now
from baton.storage.engine import Store, insert_for, on_postgresql
from baton.storage.tables import LeaderRecord

DIRECTOR_ROLE = "director"
LIVENESS_LOCK_KEY = 0x0BA7_0002
# Housekeeping where no director runs (control/housekeeping.py): one `baton worker` at a time.
HOUSEKEEPER_ROLE = "housekeeper"
HOUSEKEEPER_LIVENESS_LOCK_KEY = 0x0BA7_0004


def try_acquire_leadership(
    session: Session, role: str, holder: str, lease_seconds: float, holds_lock: bool = False
) -> int | None:
    """Take the role if nobody holds it or its lease expired, or (`holds_lock`: the caller just got
    the liveness lock) if the holder had that lock on this server since it started, i.e. its
    connection died; the new term, or None.

    A lock the holder had before the server restarted says nothing: the restart freed it along with
    every connection, the holder's included, and whoever asks first after the restart gets it. The
    leader would then be deposed by every restart of PostgreSQL, and its schedulers started over."""
    now, until = db_now(session), db_after(session, lease_seconds)
    inserted = session.execute(
        insert_for(session)(LeaderRecord)
        .values(
            role=role, holder=holder, term=1, acquired_at=now, renewed_at=now, expires_at=until, holds_lock=holds_lock
        )
        .on_conflict_do_nothing(index_elements=[LeaderRecord.role])
        .returning(LeaderRecord.term)
    ).scalar()
    if inserted is not None:
        return int(inserted)
    free = or_(LeaderRecord.expires_at.is_(None), LeaderRecord.expires_at < now)
    holder_gone = and_(literal(holds_lock), LeaderRecord.holds_lock, _renewed_on_this_server(session))
    taken = session.execute(
        update(LeaderRecord)
        .where(LeaderRecord.role == role, holder_gone | free)
        .values(
            holder=holder,
            term=LeaderRecord.term + 1,
            acquired_at=now,
            renewed_at=now,
            expires_at=until,
            holds_lock=holds_lock,
        )
        .returning(LeaderRecord.term)
    ).scalar()
    return None if taken is None else int(taken)


def _renewed_on_this_server(session: Session) -> ColumnElement[bool]:
    """The holder's last renewal (which said whether it had the lock) came after the server started."""
    if not on_postgresql(session):
        return true()  # no liveness lock there
    return LeaderRecord.renewed_at > func.pg_postmaster_start_time()


def renew_leadership(
    session: Session, role: str, holder: str, term: int, lease_seconds: float, holds_lock: bool = False
) -> bool:
    """Extend our own term. Nobody else can have taken it while (holder, term) still match, even if
    it lapsed: a takeover increments the term."""
    renewed = session.execute(
        update(LeaderRecord)
        .where(LeaderRecord.role == role, LeaderRecord.holder == holder, LeaderRecord.term == term)
        .values(renewed_at=db_now(session), expires_at=db_after(session, lease_seconds), holds_lock=holds_lock)
        .returning(LeaderRecord.term)
    ).scalar()
    return renewed is not None


def release_leadership(session: Session, role: str, holder: str, term: int) -> None:
    """Step down: the lease ends now, so a standby takes over on its next try."""
    session.execute(
        update(LeaderRecord)
        .where(LeaderRecord.role == role, LeaderRecord.holder == holder, LeaderRecord.term == term)
        .values(expires_at=db_now(session))
    )


def report_leadership(session: Session, role: str, holder: str, term: int, expires_at: datetime | None) -> None:
    """Record a leadership decided elsewhere (a Kubernetes Lease): for the API, metrics and status."""
    now = utcnow()
    row = session.get(LeaderRecord, role)
    if row is None:
        session.add(
            LeaderRecord(role=role, holder=holder, term=term, acquired_at=now, renewed_at=now, expires_at=expires_at)
        )
        return
    if row.holder != holder or row.term != term:
        row.acquired_at = now
    row.holder, row.term, row.renewed_at, row.expires_at = holder, term, now, expires_at


def leadership(session: Session, role: str = DIRECTOR_ROLE) -> Leadership | None:
    row = session.get(LeaderRecord, role)
    if row is None:
        return None
    return Leadership(row.role, row.holder, row.term, row.expires_at)


def term_is_current(session: Session, term: int, role: str = DIRECTOR_ROLE) -> ColumnElement[bool]:
    """Leadership `term` of `role` holds and has not expired (checked in the statement that acts)."""
    return exists().where(
        LeaderRecord.role == role,
        LeaderRecord.term == term,
        LeaderRecord.expires_at > db_now(session),
    )


def leaders(session: Session) -> Sequence[LeaderRecord]:
    """Who leads, as reported by the leader each round (for /metrics, the status page and failover
    measurements; the election itself is a lock or a lease)."""
    return session.scalars(select(LeaderRecord).order_by(LeaderRecord.role)).all()


class LivenessLock:
    """A session advisory lock held on a connection of its own (PostgreSQL; elsewhere never held).
    The server frees it the moment that connection dies (SIGKILL, node lost, connection
    terminated): whoever gets it next knows the previous holder's connection is gone."""

    def __init__(self, store: Store, key: int = LIVENESS_LOCK_KEY) -> None:
        self.store = store
        self.key = key
        self._conn: Connection | None = None

    def hold(self) -> bool:
        """True when this process holds the lock now, newly or still (its connection answers)."""
        if not self.store.is_postgresql:
            return False
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
                return True
            except DBAPIError:
                self.drop()
        try:
            conn = self.store.control_engine.connect()
        except DBAPIError:
            return False
        try:
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar())
            conn.commit()
        except DBAPIError:
            got = False
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # The connection may be dead already (that is often why we drop it): then SQLAlchemy refuses
        # it with PendingRollbackError rather than a DBAPIError, and the server freed the lock anyway.
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            conn.commit()
        except SQLAlchemyError:
            pass
        try:
            conn.invalidate()
            conn.close()
        except SQLAlchemyError:
            pass


def leads_now(session: Session, role: str, holder: str, term: int) -> bool:
    """Whether `holder` leads `role` in `term` and its lease has not run out, locking the row until the
    transaction ends (PostgreSQL), so no takeover commits before what this term writes after the check."""
    row = session.execute(
        select(LeaderRecord.term)
        .where(
            LeaderRecord.role == role,
            LeaderRecord.holder == holder,
            LeaderRecord.term == term,
            LeaderRecord.expires_at > db_now(session),
        )
        .with_for_update()
    ).first()
    return row is not None
