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
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter
from sqlalchemy.orm import Session

from baton.core.model import OrganisationId, SchedulerType, scheduler_id_for, utcnow
from baton.storage import inbox
from baton.storage.tables import Event


def _reject_strings_and_bools(value: object) -> object:
    # JSON integers may be written 3.0 (JSON Schema agrees), but "3" and true are not numbers.
    if isinstance(value, str | bool):
        raise ValueError("Input should be a valid integer")
    return value


NOT_A_STRING = BeforeValidator(_reject_strings_and_bools)
ScanLevel = Annotated[int, Field(ge=0, le=4, description="Scan level (clearance) 0-4."), NOT_A_STRING]


class EventModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScannedObject(EventModel):
    primary_key: str = Field(min_length=1, max_length=512, examples=["Hostname|internet|example.com"])
    object_type: str = Field(min_length=1, max_length=128, examples=["Hostname"])
    scan_level: ScanLevel = Field(description="Clearance level of the object (0-4).")


class ScanProfileMutation(EventModel):
    """An object's scan level changed: boefjes that may now scan it get tasks."""

    type: Literal["scan_profile_mutation"]
    operation: Literal["create", "update", "delete"] = "update"
    object: ScannedObject


class RawFile(EventModel):
    id: str = Field(min_length=1, max_length=256)
    mime_types: list[str] = Field(min_length=1, max_length=64)
    boefje_id: str | None = Field(None, max_length=128)
    input_ooi: str | None = Field(None, max_length=512)


class RawFileReceived(EventModel):
    """A boefje produced a raw file: normalizers that read its mime types get tasks."""

    type: Literal["raw_file_received"]
    raw_file: RawFile


SchedulerEvent = Annotated[ScanProfileMutation | RawFileReceived, Field(discriminator="type")]
EVENT_ADAPTER: TypeAdapter[ScanProfileMutation | RawFileReceived] = TypeAdapter(SchedulerEvent)
CONSUMER_OF: dict[str, SchedulerType] = {
    "scan_profile_mutation": SchedulerType.BOEFJE,
    "raw_file_received": SchedulerType.NORMALIZER,
}


def target_scheduler(event: ScanProfileMutation | RawFileReceived, organisation: str) -> str:
    return scheduler_id_for(CONSUMER_OF[event.type], organisation)


# -- organisation events (consumed by directors and workers) ---------------------------------------------


class OrganisationRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: OrganisationId
    name: str | None = Field(None, min_length=1, max_length=256)


class OrganisationCreated(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["organisation.created"] = "organisation.created"
    organisation: OrganisationRef


class OrganisationDeleted(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["organisation.deleted"] = "organisation.deleted"
    organisation: OrganisationRef


OrganisationEvent = Annotated[OrganisationCreated | OrganisationDeleted, Field(discriminator="type")]
ORGANISATION_EVENT: TypeAdapter[OrganisationCreated | OrganisationDeleted] = TypeAdapter(OrganisationEvent)


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


def enqueue_event(session: Session, scheduler_id: str, event: ScanProfileMutation | RawFileReceived) -> Event:
    return inbox.enqueue_event(session, scheduler_id, event.type, event.model_dump(mode="json"))


class InboxDelivery:
    def __init__(self, row: Event) -> None:
        self.row = row
        self.payload: dict[str, Any] = row.payload

    def settle(self, session: Session) -> None:
        self.row.consumed_at = utcnow()
        session.add(self.row)

    def ack(self) -> None:
        return None

    def nack(self) -> None:
        return None  # the rollback left the row unconsumed: it is delivered again

    def reject(self, reason: str) -> None:
        return None  # the inbox only holds events validated at the API; settle() still consumes it


class DatabaseInbox:
    """Pending rows of the `events` table for one scheduler, claimed with SKIP LOCKED."""

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
