"""Schedulers: live state from heartbeats (the one staleness rule), who holds each (owner, term,
lease) and under which leadership; enabling and disabling one."""

from __future__ import annotations

from baton.api import routing, security
from baton.api.deps import Responses, SettingsDep, StoreDep
from baton.api.schemas import ErrorOut, LeaderOut, SchedulerOut, SchedulerPatch
from baton.core.heartbeat import live_state
from baton.core.model import SchedulerState, SchedulerType, utcnow
from baton.storage.leadership import Leadership, leadership
from baton.storage.scheduler_rows import get_scheduler, list_schedulers
from baton.storage.tables import Scheduler

router = routing.router(prefix="/schedulers", tags=["schedulers"])
UNKNOWN_SCHEDULER: Responses = {404: {"model": ErrorOut, "description": "Unknown scheduler"}}


def leader_out(lead: Leadership | None) -> LeaderOut | None:
    if lead is None:
        return None
    return LeaderOut(role=lead.role, holder=lead.holder, term=lead.term, lease_expires_at=lead.expires_at)


def scheduler_out(row: Scheduler, heartbeat_timeout: float, leader: LeaderOut | None = None) -> SchedulerOut:
    return SchedulerOut(
        id=row.id,
        organisation=row.organisation,
        type=SchedulerType(row.type),
        enabled=row.enabled,
        maxsize=row.maxsize,
        runner=row.runner,
        state=live_state(SchedulerState(row.state), row.heartbeat_at, utcnow(), heartbeat_timeout),
        location=row.location,
        last_heartbeat=row.heartbeat_at,
        owner=row.owner,
        term=row.term,
        lease_expires_at=row.lease_expires_at,
        leader=leader,
    )


@router.get("", dependencies=[security.READ])
def list_all(store: StoreDep, settings: SettingsDep) -> list[SchedulerOut]:
    with store.session() as session:
        timeout = settings.timing.heartbeat_timeout_seconds
        leader = leader_out(leadership(session))
        return [scheduler_out(row, timeout, leader) for row in list_schedulers(session)]


@router.get("/{scheduler_id}", responses=UNKNOWN_SCHEDULER, dependencies=[security.READ])
def get_one(scheduler_id: str, store: StoreDep, settings: SettingsDep) -> SchedulerOut:
    with store.session() as session:
        row = get_scheduler(session, scheduler_id)
        return scheduler_out(row, settings.timing.heartbeat_timeout_seconds, leader_out(leadership(session)))


@router.patch("/{scheduler_id}", responses=UNKNOWN_SCHEDULER, dependencies=[security.ADMIN])
def patch(scheduler_id: str, body: SchedulerPatch, store: StoreDep, settings: SettingsDep) -> SchedulerOut:
    """Enable or disable a scheduler: a disabled one ingests nothing and its queue refuses pushes."""
    with store.session() as session:
        row = get_scheduler(session, scheduler_id)
        row.enabled = body.enabled
        return scheduler_out(row, settings.timing.heartbeat_timeout_seconds, leader_out(leadership(session)))
