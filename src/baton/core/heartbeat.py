"""The one rule for liveness: a beat (a scheduler's heartbeat, a leader's or worker's renewal) older
than its timeout is overdue. Used by the API, the status page, the director and `baton probe`."""

from __future__ import annotations

from datetime import datetime, timedelta

from baton.core.model import SchedulerState

CLAIMS_TO_RUN = frozenset({SchedulerState.STARTING, SchedulerState.RUNNING})


def is_overdue(beat_at: datetime | None, now: datetime, timeout_seconds: float) -> bool:
    """No beat at all, or the last one longer ago than the timeout."""
    return beat_at is None or now - beat_at > timedelta(seconds=timeout_seconds)


def is_stale(state: SchedulerState, heartbeat_at: datetime | None, now: datetime, timeout_seconds: float) -> bool:
    """A scheduler that claims to run but has not heartbeated within the timeout is stale."""
    return state in CLAIMS_TO_RUN and is_overdue(heartbeat_at, now, timeout_seconds)


def live_state(state: SchedulerState, heartbeat_at: datetime | None, now: datetime, timeout: float) -> SchedulerState:
    """What to show: a stale scheduler is shown failed, whatever it last wrote."""
    return SchedulerState.FAILED if is_stale(state, heartbeat_at, now, timeout) else state
