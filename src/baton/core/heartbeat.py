"""The one rule for a scheduler's liveness, used by the API, the status page and the director."""

from __future__ import annotations

from datetime import datetime, timedelta

from baton.core.model import SchedulerState

CLAIMS_TO_RUN = frozenset({SchedulerState.STARTING, SchedulerState.RUNNING})


def is_stale(state: SchedulerState, heartbeat_at: datetime | None, now: datetime, timeout_seconds: float) -> bool:
    """A scheduler that claims to run but has not heartbeated within the timeout is stale."""
    if state not in CLAIMS_TO_RUN:
        return False
    return heartbeat_at is None or now - heartbeat_at > timedelta(seconds=timeout_seconds)


def live_state(state: SchedulerState, heartbeat_at: datetime | None, now: datetime, timeout: float) -> SchedulerState:
    """What to show: a stale scheduler is shown failed, whatever it last wrote."""
    return SchedulerState.FAILED if is_stale(state, heartbeat_at, now, timeout) else state
