"""Events in over HTTP: accepted into the inbox of the organisation's scheduler that consumes them.

The scheduler consumes them later (ingest/); an event is only stored here. The API reads the event
(its kind, its consumer, the organisation an OpenKAT message names) with core's event shapes and hands
over what it read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from baton.core.errors import ContradictoryInputError
from baton.core.model import SchedulerType, scheduler_id_for


@dataclass(frozen=True)
class IncomingEvent:
    kind: str
    consumer: SchedulerType
    named_organisation: str | None  # what an OpenKAT message names; Baton's events name none
    payload: dict[str, Any]


@dataclass(frozen=True)
class AcceptedEvent:
    id: int
    scheduler_id: str
    type: str


class Inboxes(Protocol):
    """The schedulers' inboxes (storage/ports/events.py)."""

    def enqueue(self, org_id: str, scheduler_id: str, kind: str, payload: dict[str, Any]) -> int: ...


class Events:
    def __init__(self, inboxes: Inboxes) -> None:
        self.inboxes = inboxes

    def accept(self, org_id: str, event: IncomingEvent) -> AcceptedEvent:
        """Store the event for the organisation's scheduler. An organisation the event names must be the
        one it is posted to; the organisation and its scheduler must exist (NotFoundError)."""
        named = event.named_organisation
        if named is not None and named != org_id:
            raise ContradictoryInputError(f"the event names organisation '{named}', the path '{org_id}'")
        scheduler_id = scheduler_id_for(event.consumer, org_id)
        seq = self.inboxes.enqueue(org_id, scheduler_id, event.kind, event.payload)
        return AcceptedEvent(id=seq, scheduler_id=scheduler_id, type=event.kind)
