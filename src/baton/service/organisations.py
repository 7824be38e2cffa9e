"""Organisations: creating one creates its three queues; weight and cap set its fair share."""

from __future__ import annotations

from typing import Protocol

from baton.core.listing import Page, PageRequest, cut_page
from baton.core.views import OrganisationView


class OrganisationRecords(Protocol):
    """The stored organisations (storage/ports/organisations.py)."""

    def create(
        self, org_id: str, name: str, *, maxsize: int, weight: int, max_in_flight: int | None
    ) -> OrganisationView: ...

    def page(self, request: PageRequest) -> list[OrganisationView]: ...

    def get(self, org_id: str) -> OrganisationView: ...

    def set_fair_share(
        self, org_id: str, weight: int | None, max_in_flight: int | None, *, cap_given: bool
    ) -> OrganisationView: ...

    def delete(self, org_id: str) -> None: ...


class Organisations:
    def __init__(self, records: OrganisationRecords, queue_maxsize: int) -> None:
        self.records = records
        self.queue_maxsize = queue_maxsize

    def create(self, org_id: str, name: str, *, weight: int, max_in_flight: int | None) -> OrganisationView:
        """A new organisation and its queues of BATON_QUEUE_MAXSIZE each; ConflictError when the id is taken."""
        return self.records.create(org_id, name, maxsize=self.queue_maxsize, weight=weight, max_in_flight=max_in_flight)

    def page(self, request: PageRequest) -> Page[OrganisationView]:
        """A keyset page of organisations by id (`core.listing`)."""
        return cut_page(request, self.records.page(request), lambda org: (org.id,))

    def get(self, org_id: str) -> OrganisationView:
        return self.records.get(org_id)

    def set_fair_share(
        self, org_id: str, weight: int | None, max_in_flight: int | None, *, cap_given: bool
    ) -> OrganisationView:
        """A new `weight` unless None; the cap `max_in_flight` when `cap_given` (None removes it)."""
        return self.records.set_fair_share(org_id, weight, max_in_flight, cap_given=cap_given)

    def delete(self, org_id: str) -> None:
        """The organisation goes with its queues and their tasks; NotFoundError when unknown."""
        self.records.delete(org_id)
