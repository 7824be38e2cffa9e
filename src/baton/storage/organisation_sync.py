"""Organisations as KATalogus lists them: those the KATalogus sync created (`organisations.source`), the
ones it adds and, by storage/organisations.py's delete, the ones it removes."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from baton.core.catalogue import AUTO_SOURCE, KATALOGUS_SOURCE
from baton.storage.organisations import ensure_organisation
from baton.storage.tables import Organisation


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
