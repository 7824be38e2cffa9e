"""Organisations: creating one creates its three queues; weight and cap set its fair share."""

from __future__ import annotations

from baton.core.listing import Page, PageRequest, cut_page
from baton.storage.control import organisations as rows
from baton.storage.engine import Store
from baton.storage.queues import listings
from baton.storage.tables import Organisation as Organisation

__all__ = ["Organisation"]


def create_organisation(
    store: Store, org_id: str, name: str, *, maxsize: int, weight: int, max_in_flight: int | None
) -> Organisation:
    """A new organisation and its queues of `maxsize` each; ConflictError when the id is taken."""
    with store.session() as session:
        return rows.create_organisation(session, org_id, name, maxsize, weight=weight, max_in_flight=max_in_flight)


def organisations_page(store: Store, request: PageRequest) -> Page[Organisation]:
    """A keyset page of organisations by id (`core.listing`)."""
    with store.session() as session:
        found = list(listings.organisations_page(session, request))
    return cut_page(request, found, lambda org: (org.id,))


def get_organisation(store: Store, org_id: str) -> Organisation:
    with store.session() as session:
        return rows.get_organisation(session, org_id)


def set_fair_share(
    store: Store, org_id: str, weight: int | None, max_in_flight: int | None, *, cap_given: bool
) -> Organisation:
    """A new `weight` unless None; the cap `max_in_flight` when `cap_given` (None removes it)."""
    with store.session() as session:
        return rows.set_fair_share(session, org_id, weight, max_in_flight, cap_given=cap_given)


def delete_organisation(store: Store, org_id: str) -> None:
    """The organisation goes with its queues and their tasks; NotFoundError when unknown."""
    with store.session() as session:
        rows.delete_organisation(session, org_id)
