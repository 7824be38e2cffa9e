"""Schedulers as `/schedulers` shows them: live state by the heartbeat rule, who holds each (owner,
term, lease) and under which leadership; enabling and disabling one."""

from __future__ import annotations

from dataclasses import dataclass

from baton.core.heartbeat import live_state
from baton.core.listing import Page, PageRequest, cut_page
from baton.core.model import SchedulerState, utcnow
from baton.storage.control import scheduler_rows as rows
from baton.storage.control.leadership import Leadership as Leadership
from baton.storage.control.leadership import leadership
from baton.storage.engine import Session, Store
from baton.storage.queues import listings
from baton.storage.tables import Scheduler


@dataclass(frozen=True)
class SchedulerView:
    """A scheduler row as shown, with its state by the heartbeat rule (a scheduler that claims to run
    without a recent heartbeat is shown failed) and the directors' leadership."""

    row: Scheduler
    state: SchedulerState
    leader: Leadership | None


def scheduler_view(row: Scheduler, heartbeat_timeout: float, leader: Leadership | None) -> SchedulerView:
    state = live_state(SchedulerState(row.state), row.heartbeat_at, utcnow(), heartbeat_timeout)
    return SchedulerView(row, state, leader)


def _view(session: Session, row: Scheduler, heartbeat_timeout: float) -> SchedulerView:
    return scheduler_view(row, heartbeat_timeout, leadership(session))


def schedulers_page(store: Store, request: PageRequest, heartbeat_timeout: float) -> Page[SchedulerView]:
    """A keyset page of schedulers by (organisation, id) (`core.listing`)."""
    with store.session() as session:
        leader = leadership(session)
        found = [scheduler_view(row, heartbeat_timeout, leader) for row in listings.schedulers_page(session, request)]
    return cut_page(request, found, lambda view: (view.row.organisation, view.row.id))


def get_scheduler(store: Store, scheduler_id: str, heartbeat_timeout: float) -> SchedulerView:
    with store.session() as session:
        return _view(session, rows.get_scheduler(session, scheduler_id), heartbeat_timeout)


def set_enabled(store: Store, scheduler_id: str, enabled: bool, heartbeat_timeout: float) -> SchedulerView:
    """A disabled scheduler ingests nothing and its queue refuses pushes."""
    with store.session() as session:
        return _view(session, rows.set_enabled(session, scheduler_id, enabled), heartbeat_timeout)
