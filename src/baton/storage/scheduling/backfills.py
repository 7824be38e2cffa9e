"""The boefje_backfills table: boefjes newly enabled for an organisation whose existing objects still
need tasks, with the cursor into Octopoes' listing of those objects (so a restart resumes, never starts
over or skips)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from baton.core.catalogue import ListedPlugin
from baton.storage.engine import insert_for
from baton.storage.tables import BoefjeBackfill


@dataclass(frozen=True)
class Backfill:
    organisation: str
    boefje_id: str
    object_types: tuple[str, ...]
    scan_level: int
    valid_time: datetime  # the moment Octopoes lists the objects at, the same for every page
    next_offset: int


def start_backfills(session: Session, organisation: str, boefjes: Sequence[ListedPlugin], now: datetime) -> None:
    """Begin (or begin again, from the first object) the backfill of each boefje, of the objects that
    exist `now`."""
    if not boefjes:
        return
    rows = [
        {
            "organisation": organisation,
            "boefje_id": boefje.id,
            "object_types": sorted(boefje.consumes),
            "scan_level": boefje.scan_level,
            "valid_time": now,
            "next_offset": 0,
            "created_at": now,
        }
        for boefje in sorted(boefjes, key=lambda boefje: boefje.id)
    ]
    stmt = insert_for(session)(BoefjeBackfill).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[BoefjeBackfill.organisation, BoefjeBackfill.boefje_id],
            set_={
                "object_types": stmt.excluded.object_types,
                "scan_level": stmt.excluded.scan_level,
                "valid_time": stmt.excluded.valid_time,
                "next_offset": 0,
                "created_at": stmt.excluded.created_at,
            },
        )
    )


def drop_backfills(session: Session, organisation: str, boefje_ids: Iterable[str]) -> None:
    ids = sorted(set(boefje_ids))
    if ids:
        session.execute(
            delete(BoefjeBackfill).where(BoefjeBackfill.organisation == organisation, BoefjeBackfill.boefje_id.in_(ids))
        )


def next_backfill(session: Session, organisation: str) -> Backfill | None:
    """The organisation's oldest unfinished backfill."""
    row = session.scalars(
        select(BoefjeBackfill)
        .where(BoefjeBackfill.organisation == organisation)
        .order_by(BoefjeBackfill.created_at, BoefjeBackfill.boefje_id)
        .limit(1)
    ).first()
    return None if row is None else _backfill(row)


def advance_backfill(session: Session, backfill: Backfill, next_offset: int | None) -> bool:
    """Move the backfill on to `next_offset` (None: it is done, the row goes), provided it is where
    `backfill` says it was (not begun again meanwhile); False when it was not."""
    where = (
        BoefjeBackfill.organisation == backfill.organisation,
        BoefjeBackfill.boefje_id == backfill.boefje_id,
        BoefjeBackfill.next_offset == backfill.next_offset,
        BoefjeBackfill.valid_time == backfill.valid_time,
    )
    if next_offset is None:
        gone = session.execute(delete(BoefjeBackfill).where(*where).returning(BoefjeBackfill.boefje_id))
        return gone.first() is not None
    moved = session.execute(
        update(BoefjeBackfill).where(*where).values(next_offset=next_offset).returning(BoefjeBackfill.boefje_id)
    )
    return moved.first() is not None


def backfills(session: Session, organisation: str | None = None) -> list[Backfill]:
    """Every unfinished backfill (of one organisation), for the status page and tests."""
    query = select(BoefjeBackfill).order_by(BoefjeBackfill.organisation, BoefjeBackfill.created_at)
    if organisation is not None:
        query = query.where(BoefjeBackfill.organisation == organisation)
    return [_backfill(row) for row in session.scalars(query)]


def _backfill(row: BoefjeBackfill) -> Backfill:
    return Backfill(
        row.organisation, row.boefje_id, tuple(row.object_types), row.scan_level, row.valid_time, row.next_offset
    )
