"""Organisations as the API edits and lists them (service/organisations.py's port)."""

from __future__ import annotations

from baton.core.listing import PageRequest
from baton.core.views import OrganisationView
from baton.storage.control import organisations as rows
from baton.storage.engine import Store
from baton.storage.ports.rows import view_of
from baton.storage.queues import listings


class OrganisationRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self, org_id: str, name: str, *, maxsize: int, weight: int, max_in_flight: int | None
    ) -> OrganisationView:
        with self.store.session() as session:
            row = rows.create_organisation(session, org_id, name, maxsize, weight=weight, max_in_flight=max_in_flight)
            return view_of(OrganisationView, row)

    def page(self, request: PageRequest) -> list[OrganisationView]:
        with self.store.session() as session:
            return [view_of(OrganisationView, row) for row in listings.organisations_page(session, request)]

    def get(self, org_id: str) -> OrganisationView:
        with self.store.session() as session:
            return view_of(OrganisationView, rows.get_organisation(session, org_id))

    def set_fair_share(
        self, org_id: str, weight: int | None, max_in_flight: int | None, *, cap_given: bool
    ) -> OrganisationView:
        with self.store.session() as session:
            row = rows.set_fair_share(session, org_id, weight, max_in_flight, cap_given=cap_given)
            return view_of(OrganisationView, row)

    def delete(self, org_id: str) -> None:
        with self.store.session() as session:
            rows.delete_organisation(session, org_id)
