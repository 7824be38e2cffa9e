"""Schedulers as `/schedulers` shows them: live state by the heartbeat rule, who holds each (owner,
term, lease) and under which leadership; enabling and disabling one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from baton.core.heartbeat import live_state
from baton.core.listing import Page, PageRequest, cut_page
from baton.core.model import SchedulerState, utcnow
from baton.core.views import Leadership as Leadership
from baton.core.views import SchedulerRecord


class SchedulerRecords(Protocol):
    """The stored schedulers, each answer with the directors' leadership (storage/ports/schedulers.py)."""

    def page(self, request: PageRequest) -> tuple[list[SchedulerRecord], Leadership | None]: ...

    def get(self, scheduler_id: str) -> tuple[SchedulerRecord, Leadership | None]: ...

    def set_enabled(self, scheduler_id: str, enabled: bool) -> tuple[SchedulerRecord, Leadership | None]: ...


@dataclass(frozen=True)
class SchedulerView:
    """A scheduler as shown, with its state by the heartbeat rule (a scheduler that claims to run
    without a recent heartbeat is shown failed) and the directors' leadership."""

    row: SchedulerRecord
    state: SchedulerState
    leader: Leadership | None


def scheduler_view(row: SchedulerRecord, heartbeat_timeout: float, leader: Leadership | None) -> SchedulerView:
    state = live_state(SchedulerState(row.state), row.heartbeat_at, utcnow(), heartbeat_timeout)
    return SchedulerView(row, state, leader)


class Schedulers:
    def __init__(self, records: SchedulerRecords, heartbeat_timeout: float) -> None:
        self.records = records
        self.heartbeat_timeout = heartbeat_timeout

    def page(self, request: PageRequest) -> Page[SchedulerView]:
        """A keyset page of schedulers by (organisation, id) (`core.listing`)."""
        rows, leader = self.records.page(request)
        found = [scheduler_view(row, self.heartbeat_timeout, leader) for row in rows]
        return cut_page(request, found, lambda view: (view.row.organisation, view.row.id))

    def get(self, scheduler_id: str) -> SchedulerView:
        return scheduler_view(*self._with_timeout(self.records.get(scheduler_id)))

    def set_enabled(self, scheduler_id: str, enabled: bool) -> SchedulerView:
        """A disabled scheduler ingests nothing and its queue refuses pushes."""
        return scheduler_view(*self._with_timeout(self.records.set_enabled(scheduler_id, enabled)))

    def _with_timeout(
        self, found: tuple[SchedulerRecord, Leadership | None]
    ) -> tuple[SchedulerRecord, float, Leadership | None]:
        return found[0], self.heartbeat_timeout, found[1]
