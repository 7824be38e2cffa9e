"""Schedulers: live state from heartbeats; enabling and disabling one."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

from baton.api.deps import Responses, SettingsDep, StoreDep
from baton.models import Scheduler, SchedulerState, SchedulerType, utcnow
from baton.schemas import ErrorOut, SchedulerOut, SchedulerPatch
from baton.store import get_scheduler, list_schedulers

router = APIRouter(prefix="/schedulers", tags=["schedulers"])
UNKNOWN_SCHEDULER: Responses = {404: {"model": ErrorOut, "description": "Unknown scheduler"}}


def live_state(row: Scheduler, heartbeat_timeout: float) -> SchedulerState:
    """A scheduler claiming to run whose heartbeat went stale is shown failed."""
    state = SchedulerState(row.state)
    if state in (SchedulerState.RUNNING, SchedulerState.STARTING) and (
        row.heartbeat_at is None or utcnow() - row.heartbeat_at > timedelta(seconds=heartbeat_timeout)
    ):
        return SchedulerState.FAILED
    return state


def scheduler_out(row: Scheduler, heartbeat_timeout: float) -> SchedulerOut:
    return SchedulerOut(
        id=row.id,
        organisation=row.organisation,
        type=SchedulerType(row.type),
        enabled=row.enabled,
        maxsize=row.maxsize,
        runner=row.runner,
        state=live_state(row, heartbeat_timeout),
        location=row.location,
        last_heartbeat=row.heartbeat_at,
    )


@router.get("")
def list_all(store: StoreDep, settings: SettingsDep) -> list[SchedulerOut]:
    with store.session() as session:
        return [scheduler_out(row, settings.heartbeat_timeout_seconds) for row in list_schedulers(session)]


@router.get("/{scheduler_id}", responses=UNKNOWN_SCHEDULER)
def get_one(scheduler_id: str, store: StoreDep, settings: SettingsDep) -> SchedulerOut:
    with store.session() as session:
        return scheduler_out(get_scheduler(session, scheduler_id), settings.heartbeat_timeout_seconds)


@router.patch("/{scheduler_id}", responses=UNKNOWN_SCHEDULER)
def patch(scheduler_id: str, body: SchedulerPatch, store: StoreDep, settings: SettingsDep) -> SchedulerOut:
    """Enable or disable a scheduler: a disabled one ingests nothing and its queue refuses pushes."""
    with store.session() as session:
        row = get_scheduler(session, scheduler_id)
        row.enabled = body.enabled
        return scheduler_out(row, settings.heartbeat_timeout_seconds)
