"""Leases: who leads, who runs each scheduler, and the fencing check every scheduler write passes.

One mechanism for both. A lease is a row with a holder, a term and an expiry on the database's clock
(`clock_timestamp()` on PostgreSQL, so replicas' clocks never matter; SQLite is one machine).

- Leadership: a `leaders` row per role. The holder renews it; anyone may take it over by a
  conditional UPDATE once it has expired, and every takeover increments the term. A frozen holder
  keeps its connection but cannot renew, so the lease ends in bounded time.
- Scheduler ownership: each `schedulers` row has an owner, a term and an expiry. A claim sets the
  owner and increments the term; the owner renews its rows in one statement per round.
- Fencing: every transaction a scheduler writes in starts by locking its row FOR SHARE where
  (owner, term) are still its own. A new owner's claim (an UPDATE) waits for that lock, and every
  later write of the old owner finds a different term and is refused: no write from a superseded
  term lands after the new term's first write, whatever the clocks say.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    String,
    and_,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from baton.core.errors import FencedError
from baton.core.model import utcnow
from baton.storage.engine import insert_for, on_postgresql
from baton.storage.tables import LeaderRecord, Organisation, Scheduler, UTCDateTime, WorkerRecord
from baton.storage.urls import database_address

if TYPE_CHECKING:
    import psycopg

DIRECTOR_ROLE = "director"
CLAIM_SETTING = "baton.claim"
REVOKE_LOCK_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class Claim:
    """The right to run one scheduler: its row, its owner and the term of this claim (the token)."""

    scheduler_id: str
    owner: str
    term: int


@dataclass(frozen=True)
class Leadership:
    role: str
    holder: str
    term: int
    expires_at: datetime | None


# -- the database's clock -------------------------------------------------------------------------


def db_now(session: Session) -> ColumnElement[datetime]:
    if on_postgresql(session):
        return func.clock_timestamp(type_=DateTime(timezone=True))
    return literal(utcnow(), UTCDateTime())


def db_after(session: Session, seconds: float) -> ColumnElement[datetime]:
    if on_postgresql(session):
        return func.clock_timestamp(type_=DateTime(timezone=True)) + timedelta(seconds=seconds)
    return literal(utcnow() + timedelta(seconds=seconds), UTCDateTime())


# -- leadership -----------------------------------------------------------------------------------


def try_acquire_leadership(
    session: Session, role: str, holder: str, lease_seconds: float, holds_lock: bool = False
) -> int | None:
    """Take the role if nobody holds it or its lease expired, or (`holds_lock`: the caller just got
    the liveness lock) if the holder had that lock, i.e. its connection died; the new term, or None."""
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
    taken = session.execute(
        update(LeaderRecord)
        .where(LeaderRecord.role == role, and_(literal(holds_lock), LeaderRecord.holds_lock) | free)
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


def _term_is_current(session: Session, term: int, role: str = DIRECTOR_ROLE) -> ColumnElement[bool]:
    """Leadership `term` of `role` holds and has not expired (checked in the statement that acts)."""
    return exists().where(
        LeaderRecord.role == role,
        LeaderRecord.term == term,
        LeaderRecord.expires_at > db_now(session),
    )


# -- scheduler ownership --------------------------------------------------------------------------


def _claimable(session: Session) -> ColumnElement[bool]:
    return or_(Scheduler.owner.is_(None), Scheduler.lease_expires_at < db_now(session))


# The sessions of processes whose scheduler leases ran out, in a transaction for a while: every
# connection a Baton process opens is named after it (engine.connection_name), as its owner ids are.
_LAPSED_SESSIONS = text(
    """
    SELECT DISTINCT activity.pid
    FROM pg_stat_activity AS activity
    JOIN schedulers
      ON schedulers.owner IS NOT NULL
     AND schedulers.lease_expires_at < clock_timestamp()
     AND activity.application_name = left(
           'baton ' || split_part(split_part(schedulers.owner, '#', 1), ':', 2)
           || '@' || split_part(split_part(schedulers.owner, '#', 1), ':', 1), 63)
    WHERE activity.xact_start < clock_timestamp() - make_interval(secs => :older_than)
      AND activity.pid <> pg_backend_pid()
    """
)
# Baton's transactions last milliseconds; one this old in a process whose lease ran out is frozen.
LAPSED_LOCK_SECONDS = 5.0


def end_lapsed_lockers(session: Session) -> int:
    """End the transactions of processes whose scheduler leases ran out, so the rows they lock
    can be claimed.

    A process frozen in the middle of a transaction keeps its row locks. When it froze between two
    statements, PostgreSQL ends the session after the idle-in-transaction timeout; but frozen in the
    middle of a pipeline (psycopg's executemany), the session is not idle and no timeout applies
    before PostgreSQL 17's transaction_timeout: the row stays locked, and skipped by every claim,
    for as long as the freeze. Such a process lost its lease already and may write nothing, so its
    transaction is ended (rolled back) rather than waited for. PostgreSQL only."""
    if not on_postgresql(session):
        return 0
    pids = session.scalars(_LAPSED_SESSIONS, {"older_than": LAPSED_LOCK_SECONDS}).all()
    return sum(1 for pid in pids if session.scalar(select(func.pg_terminate_backend(pid))))


def claim_schedulers(
    session: Session,
    scheduler_ids: Iterable[str],
    owner: str,
    lease_seconds: float,
    leader_term: int | None = None,
    runner: str | None = None,
) -> list[Claim]:
    """Claim these schedulers where nobody holds them (or a lease expired), in one statement. With
    `leader_term`, only while that leadership term is current: a deposed director claims nothing."""
    ids = list(scheduler_ids)
    if not ids:
        return []
    conditions = [Scheduler.id.in_(ids), _claimable(session)]
    if leader_term is not None:
        conditions.append(_term_is_current(session, leader_term))
    return _claim_where(session, _unlocked(session, and_(*conditions)), owner, lease_seconds, runner)


def _unlocked(session: Session, condition: ColumnElement[bool]) -> ColumnElement[bool]:
    """`condition`, over rows no other transaction has locked (PostgreSQL): a claim or revoke never
    waits behind a transaction that a frozen process left open (it is ended after
    engine.IDLE_IN_TRANSACTION_TIMEOUT_MS); the rows it skips are taken on a later round."""
    if not on_postgresql(session):
        return condition
    rows = select(Scheduler.id).where(condition).with_for_update(skip_locked=True)
    return and_(Scheduler.id.in_(rows.scalar_subquery()), condition)


def claim_unowned(
    session: Session,
    owner: str,
    limit: int,
    lease_seconds: float,
    runner: str | None = None,
    running_here: Iterable[str] = (),
) -> list[Claim]:
    """Up to `limit` schedulers nobody holds, competing claimants skipping each other's rows.
    `running_here`: schedulers the claimant runs already; their leases may have lapsed (renewals
    late under load), but claiming them again would only fence out our own running scheduler."""
    if limit <= 0:
        return []
    condition = _claimable(session)
    excluded = list(running_here)
    if excluded:
        condition = and_(condition, Scheduler.id.not_in(excluded))
    candidates = (
        select(Scheduler.id)
        .join(Organisation, Organisation.id == Scheduler.organisation)
        .where(condition)
        .order_by(Scheduler.id)
        .limit(limit)
    )
    if on_postgresql(session):
        candidates = candidates.with_for_update(of=Scheduler, skip_locked=True)
    return _claim_where(session, Scheduler.id.in_(candidates.scalar_subquery()), owner, lease_seconds, runner)


def _claim_where(
    session: Session, condition: ColumnElement[bool], owner: str, lease_seconds: float, runner: str | None
) -> list[Claim]:
    values: dict[str, Any] = {
        "owner": owner,
        "term": Scheduler.term + 1,
        "lease_expires_at": db_after(session, lease_seconds),
        "heartbeat_at": db_now(session),
        "location": owner.split("#", 1)[0],  # host:pid, as every location reads
        "state": "starting",
    }
    if runner is not None:
        values["runner"] = runner
    rows = session.execute(
        update(Scheduler)
        .where(condition)
        .values(**values)
        .returning(Scheduler.id, Scheduler.term)
        .execution_options(synchronize_session=False)
    ).all()
    return [Claim(scheduler_id, owner, int(term)) for scheduler_id, term in rows]


def _held(session: Session, claims: Sequence[Claim]) -> ColumnElement[bool]:
    """The rows still held under these very claims (owner and term). On PostgreSQL the pairs travel
    as two arrays, not two parameters per claim: a worker renews thousands in one statement."""
    owners = {claim.owner for claim in claims}
    ids = [claim.scheduler_id for claim in claims]
    terms = [claim.term for claim in claims]
    if on_postgresql(session):
        pairs: Any = select(
            func.unnest(literal(ids, postgresql.ARRAY(String))),
            func.unnest(literal(terms, postgresql.ARRAY(BigInteger))),
        )
    else:
        pairs = list(zip(ids, terms, strict=True))
    return and_(Scheduler.owner.in_(owners), tuple_(Scheduler.id, Scheduler.term).in_(pairs))


@dataclass(frozen=True)
class Renewed:
    scheduler_id: str
    enabled: bool


def renew_claims(
    session: Session, claims: Sequence[Claim], lease_seconds: float, states: dict[str, str] | None = None
) -> dict[str, Renewed]:
    """Renew many leases (and write their heartbeat) in one statement per state; the claims that
    are still ours. A claim missing from the answer was lost: its scheduler must stop."""
    states = states or {}
    by_state: dict[str | None, list[Claim]] = {}
    for claim in claims:
        by_state.setdefault(states.get(claim.scheduler_id), []).append(claim)
    renewed: dict[str, Renewed] = {}
    for state, group in by_state.items():
        values: dict[str, Any] = {
            "lease_expires_at": db_after(session, lease_seconds),
            "heartbeat_at": db_now(session),
        }
        if state is not None:
            values["state"] = state
        rows = session.execute(
            update(Scheduler)
            .where(_held(session, group))
            .values(**values)
            .returning(Scheduler.id, Scheduler.enabled)
            .execution_options(synchronize_session=False)
        ).all()
        renewed.update({scheduler_id: Renewed(scheduler_id, bool(enabled)) for scheduler_id, enabled in rows})
    return renewed


def release_claims(session: Session, claims: Sequence[Claim], state: str) -> int:
    """Give schedulers up (a graceful stop, a rebalance) so others claim them at once; only the
    rows still held under these very claims are touched."""
    if not claims:
        return 0
    result = session.execute(
        update(Scheduler)
        .where(_held(session, claims))
        .values(owner=None, lease_expires_at=None, state=state, heartbeat_at=db_now(session))
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def revoke_claims(session: Session, leader_term: int) -> int:
    """A new leader fences out everything the previous one started: each held row's term grows and
    its owner goes, so an old scheduler's next write is refused at once (no waiting for its lease).

    A live old scheduler's transaction holds its row FOR SHARE for milliseconds: the revoke waits up
    to REVOKE_LOCK_TIMEOUT for such locks. A frozen process's lock is not worth waiting for: then the
    rows free now are revoked and the rest is left to their leases (and the idle-transaction timeout).
    """
    condition = and_(Scheduler.owner.is_not(None), _term_is_current(session, leader_term))
    revoke = (
        update(Scheduler)
        .values(owner=None, term=Scheduler.term + 1, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    if on_postgresql(session):
        try:
            with session.begin_nested():
                session.execute(text(f"SET LOCAL lock_timeout = '{REVOKE_LOCK_TIMEOUT_MS}ms'"))
                result = session.execute(revoke.where(condition))
                session.execute(text("SET LOCAL lock_timeout = 0"))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]
        except OperationalError:  # a lock held past the timeout: take what is free
            session.execute(text("SET LOCAL lock_timeout = 0"))
    result = session.execute(revoke.where(_unlocked(session, condition)))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def fence(session: Session, claim: Claim) -> None:
    """The first statement of every transaction a scheduler writes in: its row, locked FOR SHARE
    while (owner, term) are still its claim's; otherwise FencedError, and nothing it writes commits."""
    columns: list[Any] = [Scheduler.owner, Scheduler.term]
    if on_postgresql(session):
        # The same round trip names the claim this transaction writes under (`baton.claim`, local
        # to the transaction), for triggers that audit who wrote what (baton.testing.writelog).
        columns.append(func.set_config(CLAIM_SETTING, f"{claim.owner}/{claim.term}", True))
    query = select(*columns).where(Scheduler.id == claim.scheduler_id)
    if on_postgresql(session):
        query = query.with_for_update(read=True)
    row = session.execute(query).first()
    if row is None:
        raise FencedError(f"scheduler '{claim.scheduler_id}' is gone (organisation deleted)")
    owner, term = row[0], row[1]
    if owner != claim.owner or int(term) != claim.term:
        raise FencedError(
            f"scheduler '{claim.scheduler_id}' is no longer ours (term {claim.term} of {claim.owner}); "
            f"now term {term} of {owner or 'nobody'}"
        )


def mark_failed_unless_claimed(session: Session, scheduler_id: str, owner_prefix: str) -> None:
    """A scheduler died in the process whose owner ids start with `owner_prefix`: show it failed and
    free its row, unless someone else holds it (then it is not ours to mark)."""
    session.execute(
        update(Scheduler)
        .where(
            Scheduler.id == scheduler_id,
            Scheduler.owner.startswith(owner_prefix, autoescape=True),
        )
        .values(state="failed", owner=None, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )


# -- workers ----------------------------------------------------------------------------------------


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
    """Workers whose row runs and none of whose scheduler leases has ended. A running worker renews
    its leases every retry period, long before they end (the renew deadline comes first), so one that
    let a lease end has died or is frozen: its peers count it out then and take over its share, not
    up to a round later when its own row ends."""
    now = db_now(session)
    lapsed = exists().where(Scheduler.owner == WorkerRecord.id, Scheduler.lease_expires_at <= now)
    return list(
        session.scalars(select(WorkerRecord.id).where(WorkerRecord.expires_at > now, ~lapsed).order_by(WorkerRecord.id))
    )


def remove_worker(session: Session, worker_id: str) -> None:
    session.execute(delete(WorkerRecord).where(WorkerRecord.id == worker_id))


def seconds_until_a_peer_lease_ends(session: Session, owner: str) -> float | None:
    """How soon the next lease of someone else runs out, a scheduler's or a worker's own, on the
    database's clock; None when no one else holds one that is still running. A worker's share grows
    when a peer's row ends, and it may claim a scheduler once the scheduler's lease has ended."""
    now = db_now(session)
    scheduler_end = select(func.min(Scheduler.lease_expires_at)).where(
        Scheduler.owner.is_not(None), Scheduler.owner != owner, Scheduler.lease_expires_at > now
    )
    worker_end = select(func.min(WorkerRecord.expires_at)).where(
        WorkerRecord.id != owner, WorkerRecord.expires_at > now
    )
    first_scheduler, first_worker, now_then = session.execute(
        select(scheduler_end.scalar_subquery(), worker_end.scalar_subquery(), now)
    ).one()
    ends = [end for end in (first_scheduler, first_worker) if end is not None]
    return (min(ends) - now_then).total_seconds() if ends else None


def count_schedulers(session: Session) -> int:
    return int(
        session.scalar(
            select(func.count()).select_from(Scheduler).join(Organisation, Organisation.id == Scheduler.organisation)
        )
        or 0
    )


# -- wake-ups between workers ------------------------------------------------------------------------

WORKERS_CHANNEL = "baton_workers"


def announce_pool_change(session: Session) -> None:
    """Tell every worker, at commit, that the pool changed (a worker joined or left, schedulers were
    given up): they run their next round now instead of at its time. PostgreSQL only."""
    if on_postgresql(session):
        session.execute(select(func.pg_notify(WORKERS_CHANNEL, "")))


class PoolChanges:
    """Waits for `announce_pool_change` from any worker (LISTEN on its own connection), or for a
    timeout. On SQLite, and while that connection cannot be made, it is a plain wait."""

    def __init__(self, url: str, stop: threading.Event) -> None:
        address = database_address(url)
        self._dsn = address.conninfo
        self._postgresql = address.backend == "postgresql"
        self._stop = stop
        self._conn: psycopg.Connection[Any] | None = None

    def wait(self, seconds: float) -> None:
        conn = self._listening()
        if conn is None:
            self._stop.wait(seconds)
            return
        import psycopg

        try:
            for _ in conn.notifies(timeout=seconds, stop_after=1):
                pass
        except psycopg.Error:
            self.close()  # listen again next time; this round waited less, which is harmless

    def _listening(self) -> psycopg.Connection[Any] | None:
        if not self._postgresql:
            return None
        import psycopg  # only where PostgreSQL is used

        if self._conn is None:
            try:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
                self._conn.execute(f"LISTEN {WORKERS_CHANNEL}")
            except psycopg.Error:
                self.close()
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()
