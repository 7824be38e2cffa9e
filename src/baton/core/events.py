"""The events Baton accepts, as shapes (no I/O): Baton's own (`scan_profile_mutation`,
`raw_file_received`), OpenKAT's messages as they are (Octopoes' ScanProfileMutation, Bytes'
RawDataReceived), and the organisation events; which scheduler type consumes each, which organisation
an OpenKAT message names, and what a planner reads from one. The API validates request bodies with
these; ingest/events.py is where they arrive from their sources.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

from baton.core.jobs import Boefje, BoefjeMeta, OpenKatOrganisation, RawData
from baton.core.model import OrganisationId, SchedulerType, scheduler_id_for


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
    """An object's scan level changed: boefjes that may now scan it get tasks (Baton's shape)."""

    type: Literal["scan_profile_mutation"]
    operation: Literal["create", "update", "delete"] = "update"
    object: ScannedObject


class RawFile(EventModel):
    id: str = Field(min_length=1, max_length=256, description="A UUID, or any id (then a UUID is derived).")
    mime_types: list[str] = Field(min_length=1, max_length=64)
    boefje_id: str | None = Field(None, max_length=128)
    input_ooi: str | None = Field(None, max_length=512)


class RawFileReceived(EventModel):
    """A boefje produced a raw file: normalizers that read its mime types get tasks (Baton's shape)."""

    type: Literal["raw_file_received"]
    raw_file: RawFile


# -- OpenKAT's own messages, as its services publish them ------------------------------------------------


class KatEventModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class KatScanProfile(KatEventModel):
    level: ScanLevel
    reference: str = Field(max_length=512)
    scan_profile_type: str | None = None


class KatObject(KatEventModel):
    primary_key: str = Field(min_length=1, max_length=512)
    object_type: str = Field(min_length=1, max_length=128)
    scan_profile: KatScanProfile


class KatScanProfileMutation(KatEventModel):
    """Octopoes' message on `scan_profile_mutations`: `value` is null for a delete."""

    operation: Literal["create", "update", "delete"]
    primary_key: str = Field(min_length=1, max_length=512)
    value: KatObject | None
    client_id: OpenKatOrganisation = Field(description="The organisation.")


class KatRawDataReceived(KatEventModel):
    """Bytes' message on `raw_file_received`: the whole raw file with the boefje job that made it."""

    created_at: datetime
    organization: OpenKatOrganisation
    raw_data: RawData


BatonEvent = Annotated[ScanProfileMutation | RawFileReceived, Field(discriminator="type")]
SchedulerEvent = BatonEvent | KatScanProfileMutation | KatRawDataReceived
AnyEvent = ScanProfileMutation | RawFileReceived | KatScanProfileMutation | KatRawDataReceived
EVENT_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(SchedulerEvent)
CONSUMER_OF: dict[type[BaseModel], SchedulerType] = {
    ScanProfileMutation: SchedulerType.BOEFJE,
    KatScanProfileMutation: SchedulerType.BOEFJE,
    RawFileReceived: SchedulerType.NORMALIZER,
    KatRawDataReceived: SchedulerType.NORMALIZER,
}
EVENT_KIND: dict[type[BaseModel], str] = {
    ScanProfileMutation: "scan_profile_mutation",
    KatScanProfileMutation: "scan_profile_mutation",
    RawFileReceived: "raw_file_received",
    KatRawDataReceived: "raw_file_received",
}


def parse_event(payload: Any) -> AnyEvent:
    """An event in any of the accepted shapes (Baton's, with `type`; OpenKAT's, without)."""
    if isinstance(payload, dict) and "type" not in payload:
        if "raw_data" in payload:
            return KatRawDataReceived.model_validate(payload)
        if "primary_key" in payload:
            return KatScanProfileMutation.model_validate(payload)
    return EVENT_ADAPTER.validate_python(payload)


def consumer_of(event: AnyEvent) -> SchedulerType:
    return CONSUMER_OF[type(event)]


def target_scheduler(event: AnyEvent, organisation: str) -> str:
    return scheduler_id_for(consumer_of(event), organisation)


def event_organisation(event: AnyEvent) -> str | None:
    """The organisation an OpenKAT message names (Baton's events take it from their queue or path)."""
    if isinstance(event, KatScanProfileMutation):
        return event.client_id
    if isinstance(event, KatRawDataReceived):
        return event.organization
    return None


@dataclass(frozen=True)
class ObjectScanLevel:
    """What a boefje scheduler needs from a scan-profile event, whatever its shape."""

    operation: str
    primary_key: str
    object_type: str | None
    scan_level: int | None


def object_scan_level(event: ScanProfileMutation | KatScanProfileMutation) -> ObjectScanLevel:
    if isinstance(event, ScanProfileMutation):
        obj = event.object
        return ObjectScanLevel(event.operation, obj.primary_key, obj.object_type, obj.scan_level)
    if event.value is None:
        return ObjectScanLevel(event.operation, event.primary_key, None, None)
    return ObjectScanLevel(
        event.operation, event.value.primary_key, event.value.object_type, event.value.scan_profile.level
    )


RAW_ID_NAMESPACE = uuid.UUID("6f0d7a3e-7d55-4c3e-9a0b-1f0e6c1b2a40")
MANUAL_BOEFJE = "manual"


def as_uuid(value: str) -> uuid.UUID:
    """The id if it is a UUID, else a UUID derived from it (the same id always gives the same UUID)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return uuid.uuid5(RAW_ID_NAMESPACE, value)


def raw_data_of(event: RawFileReceived | KatRawDataReceived, organisation: str, now: datetime) -> RawData:
    """The raw file as OpenKAT describes it. Baton's shorter event gets a boefje job made up from
    what it says (a stable id from the raw file's id), so normalizer runners can still run it. Without
    a boefje it is OpenKAT's `manual` one (a file not made by a boefje), the one id OpenKAT's web UI
    shows without looking it up in its plugin catalogue."""
    if isinstance(event, KatRawDataReceived):
        return event.raw_data
    raw = event.raw_file
    raw_id = as_uuid(raw.id)
    meta = BoefjeMeta(
        id=uuid.uuid5(RAW_ID_NAMESPACE, f"boefje-meta:{raw_id}"),
        boefje=Boefje(id=raw.boefje_id or MANUAL_BOEFJE),
        input_ooi=raw.input_ooi,
        arguments={},
        organization=organisation,
        started_at=now,
        ended_at=now,
    )
    return RawData(id=raw_id, boefje_meta=meta, mime_types=[{"value": mime} for mime in raw.mime_types])


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
