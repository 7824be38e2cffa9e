"""The boefje_runs table: when each (boefje, object) was last queued, so an object is not scanned by
the same boefje again within the grace period."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from baton.storage.engine import insert_for
from baton.storage.tables import BoefjeRun


@dataclass(frozen=True)
class RunClaim:
    """The answer to claiming one (boefje, object) run: whether it is ours now, and its previous run."""

    claimed: bool
    previous_run: datetime | None


def claim_boefje_runs(
    session: Session, organisation: str, pairs: Sequence[tuple[str, str]], now: datetime, grace: timedelta
) -> list[RunClaim]:
    """Atomically record that each (boefje, object) is queued now, unless it was within the grace
    period; one answer per pair, in order, as if claimed one after another (a pair that comes again
    was queued `now` by its first claim). One upsert, so two schedulers handling the same event at
    once cannot both claim a pair."""
    if not pairs:
        return []
    distinct = list(dict.fromkeys(pairs))
    key = tuple_(BoefjeRun.boefje_id, BoefjeRun.object_key)
    previous: dict[tuple[str, str], datetime] = {
        (boefje_id, object_key): queued_at
        for boefje_id, object_key, queued_at in session.execute(
            select(BoefjeRun.boefje_id, BoefjeRun.object_key, BoefjeRun.queued_at).where(
                BoefjeRun.organisation == organisation, key.in_(distinct)
            )
        )
    }
    stmt = (
        insert_for(session)(BoefjeRun)
        .values(
            [
                {"organisation": organisation, "boefje_id": boefje_id, "object_key": object_key, "queued_at": now}
                for boefje_id, object_key in distinct
            ]
        )
        .on_conflict_do_update(
            index_elements=[BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key],
            set_={"queued_at": now},
            where=BoefjeRun.queued_at <= now - grace,
        )
        .returning(BoefjeRun.boefje_id, BoefjeRun.object_key)
    )
    won = {(boefje_id, object_key) for boefje_id, object_key in session.execute(stmt)}
    first: dict[tuple[str, str], RunClaim] = {}
    claims: list[RunClaim] = []
    for pair in pairs:
        if pair not in first:
            first[pair] = RunClaim(pair in won, previous.get(pair))
            claims.append(first[pair])
        elif first[pair].claimed:  # queued a moment ago by its first claim
            claims.append(RunClaim(grace <= timedelta(0), now))
        else:
            claims.append(first[pair])
    return claims


def record_boefje_run(session: Session, organisation: str, boefje_id: str, object_key: str, now: datetime) -> None:
    """Record that (boefje, object) was queued now whatever its last run (a person's manual run)."""
    if len(boefje_id) > 128 or len(object_key) > 512:
        return  # beyond the table's keys: such a pair is never planned either
    session.execute(
        insert_for(session)(BoefjeRun)
        .values(organisation=organisation, boefje_id=boefje_id, object_key=object_key, queued_at=now)
        .on_conflict_do_update(
            index_elements=[BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key],
            set_={"queued_at": now},
        )
    )


def last_queued(
    session: Session, organisation: str, pairs: Collection[tuple[str, str]]
) -> dict[tuple[str, str], datetime]:
    """When each of these (boefje, object) pairs was last queued (or last ran, as Bytes said), where known."""
    if not pairs:
        return {}
    key = tuple_(BoefjeRun.boefje_id, BoefjeRun.object_key)
    found: dict[tuple[str, str], datetime] = {}
    distinct = sorted(set(pairs))
    for start in range(0, len(distinct), 500):
        rows = session.execute(
            select(BoefjeRun.boefje_id, BoefjeRun.object_key, BoefjeRun.queued_at).where(
                BoefjeRun.organisation == organisation, key.in_(distinct[start : start + 500])
            )
        )
        found.update({(boefje_id, object_key): queued_at for boefje_id, object_key, queued_at in rows})
    return found


def remember_boefje_runs(session: Session, organisation: str, runs: Sequence[tuple[str, str, datetime]]) -> None:
    """Record runs Baton did not queue itself (Bytes knows them: mula's, or started from OpenKAT's boefjes
    API) as (boefje, object, when it ran); a pair's later record is kept."""
    if not runs:
        return
    latest: dict[tuple[str, str], datetime] = {}
    for boefje_id, object_key, ran_at in runs:
        if len(boefje_id) <= 128 and len(object_key) <= 512:  # beyond the table's keys: never planned either
            latest[(boefje_id, object_key)] = max(ran_at, latest.get((boefje_id, object_key), ran_at))
    if not latest:
        return
    insert = insert_for(session)(BoefjeRun)
    session.execute(
        insert.values(
            [
                {"organisation": organisation, "boefje_id": boefje_id, "object_key": object_key, "queued_at": ran_at}
                for (boefje_id, object_key), ran_at in sorted(latest.items())
            ]
        ).on_conflict_do_update(
            index_elements=[BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key],
            set_={"queued_at": insert.excluded.queued_at},
            where=BoefjeRun.queued_at < insert.excluded.queued_at,
        )
    )
