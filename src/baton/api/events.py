"""Events in over HTTP: stored in the scheduler's inbox, consumed by the scheduler."""

from __future__ import annotations

from fastapi import status
from pydantic import BaseModel

from baton.api import routing, security
from baton.api.deps import Responses, StoreDep
from baton.api.schemas import ErrorOut
from baton.core.errors import ContradictoryInputError
from baton.ingest.events import EVENT_KIND, SchedulerEvent, enqueue_event, event_organisation, target_scheduler
from baton.storage.organisations import get_organisation
from baton.storage.scheduler_rows import get_scheduler

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
def post_event(org_id: str, event: SchedulerEvent, store: StoreDep) -> EventAccepted:
    """Queue an event for the organisation's scheduler; tasks appear once it has processed it.

    `scan_profile_mutation` feeds the boefje scheduler, `raw_file_received` the normalizer scheduler.
    OpenKAT's own messages (Octopoes' ScanProfileMutation, Bytes' RawDataReceived) are accepted as
    they are; the organisation they name must be the one in the path.
    """
    named = event_organisation(event)
    if named is not None and named != org_id:
        raise ContradictoryInputError(f"the event names organisation '{named}', the path '{org_id}'")
    with store.session() as session:
        get_organisation(session, org_id)
        scheduler_id = target_scheduler(event, org_id)
        get_scheduler(session, scheduler_id)
        row = enqueue_event(session, scheduler_id, event)
        return EventAccepted(id=row.seq, scheduler_id=scheduler_id, type=EVENT_KIND[type(event)])
