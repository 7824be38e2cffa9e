"""Events in over HTTP: stored in the scheduler's inbox, consumed by the scheduler."""

from __future__ import annotations

from fastapi import status
from pydantic import BaseModel

from baton.api import routing, security
from baton.api.deps import AppServicesDep, Responses
from baton.api.schemas import ErrorOut
from baton.core.events import EVENT_KIND, SchedulerEvent, consumer_of, event_organisation
from baton.service.events import IncomingEvent

router = routing.router(tags=["events"])
UNKNOWN_ORG: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation"}}


class EventAccepted(BaseModel):
    id: int
    scheduler_id: str
    type: str


@router.post(
    "/organisations/{org_id}/events",
    status_code=status.HTTP_202_ACCEPTED,
    responses=UNKNOWN_ORG,
    dependencies=[security.PUSH],
)
def post_event(org_id: str, event: SchedulerEvent, services: AppServicesDep) -> EventAccepted:
    """Queue an event for the organisation's scheduler; tasks appear once it has processed it.

    `scan_profile_mutation` feeds the boefje scheduler, `raw_file_received` the normalizer scheduler.
    OpenKAT's own messages (Octopoes' ScanProfileMutation, Bytes' RawDataReceived) are accepted as
    they are; the organisation they name must be the one in the path.
    """
    incoming = IncomingEvent(
        kind=EVENT_KIND[type(event)],
        consumer=consumer_of(event),
        named_organisation=event_organisation(event),
        payload=event.model_dump(mode="json"),
    )
    accepted = services.events.accept(org_id, incoming)
    return EventAccepted(id=accepted.id, scheduler_id=accepted.scheduler_id, type=accepted.type)
