"""Schedulers as `/schedulers` shows them, with the directors' leadership (service/schedulers.py's port)."""

from __future__ import annotations

from baton.core.listing import PageRequest
from baton.core.views import Leadership, SchedulerRecord
from baton.storage.control import scheduler_rows as rows
from baton.storage.control.leadership import leadership
from baton.storage.engine import Store
from baton.storage.ports.rows import view_of
from baton.storage.queues import listings


class SchedulerRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def page(self, request: PageRequest) -> tuple[list[SchedulerRecord], Leadership | None]:
        with self.store.session() as session:
            found = [view_of(SchedulerRecord, row) for row in listings.schedulers_page(session, request)]
            return found, leadership(session)

    def get(self, scheduler_id: str) -> tuple[SchedulerRecord, Leadership | None]:
        with self.store.session() as session:
            return view_of(SchedulerRecord, rows.get_scheduler(session, scheduler_id)), leadership(session)

    def set_enabled(self, scheduler_id: str, enabled: bool) -> tuple[SchedulerRecord, Leadership | None]:
        with self.store.session() as session:
            row = rows.set_enabled(session, scheduler_id, enabled)
            return view_of(SchedulerRecord, row), leadership(session)
