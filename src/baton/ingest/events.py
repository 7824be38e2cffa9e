"""Events that feed schedulers, and the sources they arrive from.

A source hands out `Delivery` objects. The scheduler processes a delivery inside one database
transaction, calls `settle(session)` in that transaction, commits, and only then calls `ack()`.
If anything fails before the commit it calls `nack()`, so the event is delivered again. Processing
is idempotent (dedup by hash, grace-period claims), so a redelivered event creates no duplicates.

Sources: `DatabaseInbox` (the `events` table, filled by `POST /organisations/{id}/events`; safe for
competing consumers through SKIP LOCKED), `InProcessSource` (a local queue, for embedding and
tests) and, in rabbitmq.py, RabbitMQ.
"""

from __future__ import annotations

import queue as stdlib_queue
from collections.abc import Sequence
from typing import Any, Protocol

from baton.core.events import (
    CONSUMER_OF,
    EVENT_ADAPTER,
    EVENT_KIND,
    MANUAL_BOEFJE,
    NOT_A_STRING,
    ORGANISATION_EVENT,
    RAW_ID_NAMESPACE,
    AnyEvent,
    BatonEvent,
    EventModel,
    KatEventModel,
    KatObject,
    KatRawDataReceived,
    KatScanProfile,
    KatScanProfileMutation,
    ObjectScanLevel,
    OrganisationCreated,
    OrganisationDeleted,
    OrganisationEvent,
    OrganisationRef,
    RawFile,
    RawFileReceived,
    ScanLevel,
    ScannedObject,
    ScanProfileMutation,
    SchedulerEvent,
    as_uuid,
    consumer_of,
    event_organisation,
    object_scan_level,
    parse_event,
    raw_data_of,
    target_scheduler,
)
from baton.storage.engine import Session
from baton.storage.scheduling import inbox
from baton.storage.tables import Event

# The event shapes are core's (pure vocabulary: the API validates with them); named here too, for the
# sources' users.
__all__ = [
    "CONSUMER_OF",
    "EVENT_ADAPTER",
    "EVENT_KIND",
    "MANUAL_BOEFJE",
    "NOT_A_STRING",
    "ORGANISATION_EVENT",
    "RAW_ID_NAMESPACE",
    "AnyEvent",
    "BatonEvent",
    "CompositeSource",
    "DatabaseInbox",
    "Delivery",
    "EventModel",
    "EventSource",
    "InProcessSource",
    "InboxDelivery",
    "KatEventModel",
    "KatObject",
    "KatRawDataReceived",
    "KatScanProfile",
    "KatScanProfileMutation",
    "LocalDelivery",
    "ObjectScanLevel",
    "OrganisationCreated",
    "OrganisationDeleted",
    "OrganisationEvent",
    "OrganisationRef",
    "RawFile",
    "RawFileReceived",
    "ScanLevel",
    "ScanProfileMutation",
    "ScannedObject",
    "SchedulerEvent",
    "as_uuid",
    "consumer_of",
    "enqueue_event",
    "event_organisation",
    "object_scan_level",
    "parse_event",
    "raw_data_of",
    "target_scheduler",
]


# -- sources -----------------------------------------------------------------------------------------------


class Delivery(Protocol):
    payload: dict[str, Any]

    def settle(self, session: Session) -> None:
        """Mark the event handled, inside the transaction that handled it."""

    def ack(self) -> None:
        """After the commit: the source may forget the event."""

    def nack(self) -> None:
        """Processing failed before the commit: deliver the event again later."""

    def reject(self, reason: str) -> None:
        """The event is malformed: never deliver it again (dead-letter it where the source can)."""


class EventSource(Protocol):
    def receive(self, session: Session, limit: int) -> Sequence[Delivery]: ...

    def close(self) -> None: ...


# -- the database inbox ----------------------------------------------------------------------------


def enqueue_event(session: Session, scheduler_id: str, event: AnyEvent) -> Event:
    return inbox.enqueue_event(session, scheduler_id, EVENT_KIND[type(event)], event.model_dump(mode="json"))


class InboxDelivery:
    def __init__(self, row: Event) -> None:
        self.row = row
        self.payload: dict[str, Any] = row.payload

    def settle(self, session: Session) -> None:
        inbox.mark_consumed(session, self.row)

    def ack(self) -> None:
        return None

    def nack(self) -> None:
        return None  # the rollback left the row unconsumed: it is delivered again

    def reject(self, reason: str) -> None:
        return None  # the inbox only holds events validated at the API; settle() still consumes it


class DatabaseInbox:
    """Pending rows of the `events` table for one scheduler, claimed with SKIP LOCKED. Its process
    looks for them and wakes the scheduler (wakeups.py): `announced`."""

    announced = True

    def __init__(self, scheduler_id: str) -> None:
        self.scheduler_id = scheduler_id

    def receive(self, session: Session, limit: int) -> Sequence[Delivery]:
        return [InboxDelivery(row) for row in inbox.claim_pending(session, self.scheduler_id, limit)]

    def close(self) -> None:
        return None


# -- in process --------------------------------------------------------------------------------------


class LocalDelivery:
    def __init__(self, source: InProcessSource, payload: dict[str, Any]) -> None:
        self._source = source
        self.payload = payload

    def settle(self, session: Session) -> None:
        return None

    def ack(self) -> None:
        return None

    def nack(self) -> None:
        self._source.put(self.payload)

    def reject(self, reason: str) -> None:
        self._source.rejected.append((self.payload, reason))


class InProcessSource:
    """A local, unbounded queue of event payloads: for embedding Baton and for tests."""

    def __init__(self) -> None:
        self._queue: stdlib_queue.Queue[dict[str, Any]] = stdlib_queue.Queue()
        self.rejected: list[tuple[dict[str, Any], str]] = []

    def put(self, payload: dict[str, Any]) -> None:
        self._queue.put(payload)

    def receive(self, session: Session, limit: int) -> Sequence[Delivery]:
        deliveries: list[Delivery] = []
        while len(deliveries) < limit:
            try:
                deliveries.append(LocalDelivery(self, self._queue.get_nowait()))
            except stdlib_queue.Empty:
                break
        return deliveries

    def close(self) -> None:
        return None


class CompositeSource:
    """Several sources read in turn (the database inbox first), up to `limit` deliveries in all."""

    def __init__(self, sources: Sequence[EventSource]) -> None:
        self.sources = list(sources)

    @property
    def announced(self) -> bool:
        return all(getattr(source, "announced", False) for source in self.sources)

    def receive(self, session: Session, limit: int) -> Sequence[Delivery]:
        deliveries: list[Delivery] = []
        for source in self.sources:
            if len(deliveries) >= limit:
                break
            deliveries.extend(source.receive(session, limit - len(deliveries)))
        return deliveries

    def close(self) -> None:
        for source in self.sources:
            source.close()
