"""The queues as the API lists them, and the organisations a push names (service/queues.py's port; its
pops and pushes go through the queue door, `storage/queues/door.py`)."""

from __future__ import annotations

from baton.core.listing import Page, PageRequest, cut_page
from baton.core.views import QueueView
from baton.storage.control.organisations import adopt_organisation
from baton.storage.control.scheduler_rows import get_scheduler
from baton.storage.engine import Store
from baton.storage.queues import listings
from baton.storage.queues.operations import queue_counts


class QueueRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def is_postgresql(self) -> bool:
        return self.store.is_postgresql

    def adopt_organisation(self, organisation: str, *, auto: bool, maxsize: int) -> bool:
        """True when the organisation exists afterwards (`auto`: a missing one is created with its queues)."""
        with self.store.session() as session:
            return adopt_organisation(session, organisation, auto=auto, maxsize=maxsize)

    def queues_page(self, request: PageRequest) -> Page[QueueView]:
        """A keyset page of queues with their counts: the counters of the page's queues only."""
        with self.store.session() as session:
            rows = list(listings.schedulers_page(session, request))
            page = cut_page(request, rows, lambda row: (row.organisation, row.id))
            counts = listings.counts_of(session, [row.id for row in page.rows])
            views = [
                QueueView(row.id, row.organisation, row.type, *counts.get(row.id, (0, 0)), row.maxsize, row.enabled)
                for row in page.rows
            ]
        return Page(views, page.next_cursor)

    def queue(self, queue_id: str) -> QueueView:
        """One queue with its counts; NotFoundError when there is none."""
        with self.store.session() as session:
            row = get_scheduler(session, queue_id)
            queued, in_flight = queue_counts(session, queue_id).get(queue_id, (0, 0))
            return QueueView(row.id, row.organisation, row.type, queued, in_flight, row.maxsize, row.enabled)
