"""Scheduler ownership: who runs each scheduler, and the fencing check every scheduler write passes.

- Ownership: each `schedulers` row has an owner and a term. A claim sets the owner, increments the
  term and leases the row for a lease's time (on the database's clock, storage/clock.py). From then
  on the owner's `lease_holders` row keeps it leased: one row per process, renewed once per retry
  period, however many schedulers it owns (idle rows are not written at all). A row's lease ends
  when both its claim's lease and its holder's have ended (`Scheduler.lease_expires_at`); its
  heartbeat is its holder's last renewal (`Scheduler.heartbeat_at`). The holder learns what it lost
  (a row taken over, revoked or deleted) from a count and a sum of terms of the rows it owns, read
  from an index with each renewal, and the full list only when those disagree with what it holds.
- Fencing: every transaction a scheduler writes in starts by locking its row FOR SHARE where
  (owner, term) are still its own. A new owner's claim (an UPDATE) waits for that lock, and every
  later write of the old owner finds a different term and is refused: no write from a superseded
  term lands after the new term's first write, whatever the clocks say.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, String, and_, delete, func, literal, or_, select, text, tuple_, update
from sqlalchemy import event as orm_events
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import ORMExecuteState, Session

from baton.core.errors import FencedError
from baton.storage.clock import db_after, db_now
from baton.storage.control.leadership import term_is_current
from baton.storage.engine import insert_for, on_postgresql
from baton.storage.tables import IS_RETIRED, LeaseHolder, Organisation, Scheduler

CLAIM_SETTING = "baton.claim"
REVOKE_LOCK_TIMEOUT_MS = 1000


@dataclass(frozen=True, slots=True)
class Claim:
    """The right to run one scheduler: its row, its owner and the term of this claim (the token)."""

    scheduler_id: str
    owner: str
    term: int


def _claimable(session: Session) -> ColumnElement[bool]:
    """Nobody holds it (or the lease ended), and its organisation is not retired."""
    free = or_(Scheduler.owner.is_(None), Scheduler.lease_expires_at < db_now(session))
    return and_(free, Scheduler.organisation.not_in(_retired_organisations()))


def _retired_organisations() -> Any:
    return select(Organisation.id).where(IS_RETIRED).scalar_subquery()


# The sessions of processes whose scheduler leases ran out, in a transaction for a while: every
# connection a Baton process opens is named after it (engine.connection_name), as its owner ids are.
_LAPSED_SESSIONS = text(
    """
    SELECT DISTINCT activity.pid
    FROM pg_stat_activity AS activity
    JOIN schedulers
      ON schedulers.owner IS NOT NULL
     AND GREATEST(schedulers.lease_expires_at,
                  (SELECT holder.expires_at FROM lease_holders AS holder WHERE holder.owner = schedulers.owner))
         < clock_timestamp()
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
        conditions.append(term_is_current(session, leader_term))
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
        .order_by(Scheduler.organisation, Scheduler.type, Scheduler.id)  # core.leases.spread_order
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
        "written_lease_expires_at": db_after(session, lease_seconds),
        "written_heartbeat_at": db_now(session),
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
    """Renew these rows' own leases (and write their heartbeat and, where given, their state) in one
    statement per state; the claims that are still ours. A claim missing from the answer was lost:
    its scheduler must stop. A process renews its holder row instead (`renew_holder`) and writes
    only the rows whose state changed with this."""
    states = states or {}
    by_state: dict[str | None, list[Claim]] = {}
    for claim in claims:
        by_state.setdefault(states.get(claim.scheduler_id), []).append(claim)
    renewed: dict[str, Renewed] = {}
    for state, group in by_state.items():
        values: dict[str, Any] = {
            "written_lease_expires_at": db_after(session, lease_seconds),
            "written_heartbeat_at": db_now(session),
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
        .values(owner=None, written_lease_expires_at=None, state=state, written_heartbeat_at=db_now(session))
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def revoke_retired_claims(session: Session, retired: Sequence[str]) -> int:
    """Take the schedulers of these retired organisations from whoever holds them (their term grows and
    their owner goes, as `revoke_claims` does): a worker learns it at its next renewal and stops them;
    nobody claims them again while their organisation is retired (`_claimable`). Rows a transaction
    holds locked are left for the next round."""
    if not retired:
        return 0
    condition = and_(Scheduler.owner.is_not(None), Scheduler.organisation.in_(retired))
    result = session.execute(
        update(Scheduler)
        .where(_unlocked(session, condition))
        .values(owner=None, term=Scheduler.term + 1, written_lease_expires_at=None, state="stopped")
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
    condition = and_(Scheduler.owner.is_not(None), term_is_current(session, leader_term))
    revoke = (
        update(Scheduler)
        .values(owner=None, term=Scheduler.term + 1, written_lease_expires_at=None)
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
        # to the transaction), for triggers that audit who wrote what (harness.writelog).
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


@contextmanager
def fenced_before_first_write(session: Session, claim: Claim) -> Iterator[None]:
    """Run the fencing check just before the session's first write: an INSERT/UPDATE/DELETE it
    executes, or a flush of changed objects. Its FOR SHARE lock then lasts until the commit."""
    checked = False

    def check() -> None:
        nonlocal checked
        if not checked:
            checked = True
            with session.no_autoflush:
                fence(session, claim)

    def on_execute(state: ORMExecuteState) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            check()

    def on_flush(flushing: Session, _context: object, _instances: object) -> None:
        if flushing.new or flushing.dirty or flushing.deleted:
            check()

    orm_events.listen(session, "do_orm_execute", on_execute)
    orm_events.listen(session, "before_flush", on_flush)
    try:
        yield
        session.flush()  # pending changes are written (and so fenced) inside the transaction
    finally:
        orm_events.remove(session, "do_orm_execute", on_execute)
        orm_events.remove(session, "before_flush", on_flush)


def mark_failed_unless_claimed(session: Session, scheduler_id: str, owner_prefix: str) -> None:
    """A scheduler died in the process whose owner ids start with `owner_prefix`: show it failed and
    free its row, unless someone else holds it (then it is not ours to mark)."""
    session.execute(
        update(Scheduler)
        .where(
            Scheduler.id == scheduler_id,
            Scheduler.owner.startswith(owner_prefix, autoescape=True),
        )
        .values(state="failed", owner=None, written_lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )


# -- lease holders: one row per process keeps every row it owns leased ---------------------------------

# A holder row whose process is long gone (it leases nothing any more) is removed by a later renewal
# of any holder (every hundredth).
FORGOTTEN_AFTER_SECONDS = 86_400.0


@dataclass(frozen=True)
class Holding:
    """What the database says an owner holds: how many rows, the sum of their terms (a claim lost
    and another gained between two renewals would leave the count as it was, not the sum), and which
    of them are disabled queues."""

    count: int
    term_sum: int
    disabled: frozenset[str]


def renew_holder(session: Session, owner: str, lease_seconds: float, forget_gone: bool = False) -> Holding:
    """Extend the lease of every row `owner` owns, in one write however many there are, and read
    back what it owns (from the (owner, term) index and the partial index of disabled queues).
    `forget_gone`: remove the rows of holders gone for a day as well."""
    values = {"expires_at": db_after(session, lease_seconds), "renewed_at": db_now(session)}
    upsert = insert_for(session)(LeaseHolder).values(owner=owner, **values)
    session.execute(upsert.on_conflict_do_update(index_elements=[LeaseHolder.owner], set_=values))
    if forget_gone:
        forgotten = LeaseHolder.expires_at < db_after(session, -FORGOTTEN_AFTER_SECONDS)
        session.execute(delete(LeaseHolder).where(forgotten))
    count, term_sum = session.execute(
        select(func.count(), func.coalesce(func.sum(Scheduler.term), 0)).where(Scheduler.owner == owner)
    ).one()
    disabled = session.scalars(select(Scheduler.id).where(Scheduler.owner == owner, ~Scheduler.enabled)).all()
    return Holding(int(count), int(term_sum), frozenset(disabled))


def owned_terms(session: Session, owner: str) -> dict[str, int]:
    """Every row `owner` owns, with its term: read when a renewal's count or sum disagrees with what
    the process holds."""
    rows = session.execute(select(Scheduler.id, Scheduler.term).where(Scheduler.owner == owner)).all()
    return {scheduler_id: int(term) for scheduler_id, term in rows}


def remove_holder(session: Session, owner: str) -> None:
    """A process that gave every row up and stops: its holder row goes (else it expires)."""
    session.execute(delete(LeaseHolder).where(LeaseHolder.owner == owner))
