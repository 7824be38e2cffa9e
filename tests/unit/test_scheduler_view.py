"""`/schedulers` shows a scheduler's state by the heartbeat rule, not what its row last said."""

from __future__ import annotations

from baton.core.model import SchedulerState
from baton.service.schedulers import Leadership, scheduler_view
from baton.storage.tables import Scheduler

LEADER = Leadership(role="director", holder="host:1#a", term=3, expires_at=None)


def row(state: SchedulerState) -> Scheduler:
    return Scheduler(id="boefje-acme", organisation="acme", type="boefje", state=state.value, heartbeat_at=None)


def test_a_scheduler_claiming_to_run_without_any_heartbeat_is_shown_failed() -> None:
    for claimed in (SchedulerState.STARTING, SchedulerState.RUNNING):
        view = scheduler_view(row(claimed), heartbeat_timeout=3600, leader=LEADER)
        assert view.state is SchedulerState.FAILED
        assert view.row.state == claimed.value  # the row keeps what it said


def test_a_scheduler_that_does_not_claim_to_run_is_shown_as_it_says() -> None:
    for state in (SchedulerState.STOPPING, SchedulerState.STOPPED, SchedulerState.FAILED):
        view = scheduler_view(row(state), heartbeat_timeout=3600, leader=None)
        assert view.state is state and view.leader is None
