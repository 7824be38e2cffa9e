"""Schedulers: live state from heartbeats (the one staleness rule), who holds each (owner, term,
lease) and under which leadership; enabling and disabling one. The views: service/schedulers.py."""

from __future__ import annotations

from fastapi import Request, Response

from baton.api import routing, security
from baton.api.deps import AppServicesDep, Responses
from baton.api.keyset import DEFAULT_LIMIT, Cursor, Limit, OrganisationSearch, PrefixSearch, link_next, page_request
from baton.api.schemas import ErrorOut, LeaderOut, SchedulerOut, SchedulerPatch
from baton.core.model import SchedulerType
from baton.service.schedulers import Leadership, SchedulerView

router = routing.router(prefix="/schedulers", tags=["schedulers"])
UNKNOWN_SCHEDULER: Responses = {404: {"model": ErrorOut, "description": "Unknown scheduler"}}


def leader_out(lead: Leadership | None) -> LeaderOut | None:
    if lead is None:
        return None
    return LeaderOut(role=lead.role, holder=lead.holder, term=lead.term, lease_expires_at=lead.expires_at)


def scheduler_out(view: SchedulerView) -> SchedulerOut:
    row = view.row
    return SchedulerOut(
        id=row.id,
        organisation=row.organisation,
        type=SchedulerType(row.type),
        enabled=row.enabled,
        maxsize=row.maxsize,
        runner=row.runner,
        state=view.state,
        location=row.location,
        last_heartbeat=row.heartbeat_at,
        owner=row.owner,
        term=row.term,
        lease_expires_at=row.lease_expires_at,
        leader=leader_out(view.leader),
    )


@router.get("", dependencies=[security.READ])
def list_all(
    request: Request,
    response: Response,
    services: AppServicesDep,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    organisation: OrganisationSearch = None,
    q: PrefixSearch = None,
) -> list[SchedulerOut]:
    """Schedulers by organisation, then id, a page at a time: the next page's address is in the `Link`
    header (`rel="next"`, none on the last page). `organisation`: one organisation's; `q`: those of
    the organisations whose id starts with it."""
    wanted = page_request("schedulers", limit, cursor, organisation, q)
    page = services.schedulers.page(wanted)
    link_next(request, response, page.next_cursor)
    return [scheduler_out(view) for view in page.rows]


@router.get("/{scheduler_id}", responses=UNKNOWN_SCHEDULER, dependencies=[security.READ])
def get_one(scheduler_id: str, services: AppServicesDep) -> SchedulerOut:
    return scheduler_out(services.schedulers.get(scheduler_id))


@router.patch("/{scheduler_id}", responses=UNKNOWN_SCHEDULER, dependencies=[security.ADMIN])
def patch(scheduler_id: str, body: SchedulerPatch, services: AppServicesDep) -> SchedulerOut:
    """Enable or disable a scheduler: a disabled one ingests nothing and its queue refuses pushes."""
    return scheduler_out(services.schedulers.set_enabled(scheduler_id, body.enabled))
