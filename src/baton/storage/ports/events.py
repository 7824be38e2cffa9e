"""Events into a scheduler's inbox (service/events.py's port)."""

from __future__ import annotations

from typing import Any

from baton.storage.control.organisations import get_organisation
from baton.storage.control.scheduler_rows import get_scheduler
from baton.storage.engine import Store
from baton.storage.scheduling import inbox


class Inboxes:
    def __init__(self, store: Store) -> None:
        self.store = store

    def enqueue(self, org_id: str, scheduler_id: str, kind: str, payload: dict[str, Any]) -> int:
        """The event's sequence number in the inbox; NotFoundError for an unknown organisation or scheduler."""
        with self.store.session() as session:
            get_organisation(session, org_id)
            get_scheduler(session, scheduler_id)
            return inbox.enqueue_event(session, scheduler_id, kind, payload).seq
