"""Events in over HTTP: stored in the scheduler's inbox, consumed by the scheduler."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import BaseModel

from baton.api.deps import Responses, StoreDep
from baton.events import SchedulerEvent, enqueue_event, target_scheduler
from baton.schemas import ErrorOut
from baton.store import get_organisation, get_scheduler

router = APIRouter(tags=["events"])
UNKNOWN_ORG: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation"}}


class EventAccepted(BaseModel):
    id: int
    scheduler_id: str
    type: str


@router.post("/organisations/{org_id}/events", status_code=status.HTTP_202_ACCEPTED, responses=UNKNOWN_ORG)
def post_event(org_id: str, event: SchedulerEvent, store: StoreDep) -> EventAccepted:
    """Queue an event for the organisation's scheduler; tasks appear once it has processed it.

    `scan_profile_mutation` feeds the boefje scheduler, `raw_file_received` the normalizer scheduler.
    """
    with store.session() as session:
        get_organisation(session, org_id)
        scheduler_id = target_scheduler(event, org_id)
        get_scheduler(session, scheduler_id)
        row = enqueue_event(session, scheduler_id, event)
        return EventAccepted(id=row.seq, scheduler_id=scheduler_id, type=event.type)
