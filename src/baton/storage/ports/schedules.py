"""Schedules and report schedules (service/schedules.py's port)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from baton.core.views import ScheduleQuery, ScheduleView
from baton.storage.control.organisations import adopt_organisation, get_organisation
from baton.storage.engine import Store
from baton.storage.ports.rows import view_of
from baton.storage.scheduling import schedules as rows


class ScheduleRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self,
        *,
        scheduler_id: str,
        organisation: str,
        data: dict[str, Any],
        schedule: str | None,
        deadline_at: datetime | None,
        schedule_hash: str,
        enabled: bool = True,
        adopt: tuple[bool, int] | None = None,
    ) -> ScheduleView:
        """`adopt` (auto, maxsize): an unknown organisation is created by the auto-organisation rule first."""
        with self.store.session() as session:
            if adopt is not None:
                adopt_organisation(session, organisation, auto=adopt[0], maxsize=adopt[1])
            row = rows.create_schedule(
                session,
                scheduler_id=scheduler_id,
                organisation=organisation,
                data=data,
                schedule=schedule,
                deadline_at=deadline_at,
                schedule_hash=schedule_hash,
                enabled=enabled,
            )
            return view_of(ScheduleView, row)

    def find(self, query: ScheduleQuery, limit: int, offset: int = 0) -> tuple[int, list[ScheduleView]]:
        with self.store.session() as session:
            count, found = rows.list_schedules(session, query, limit=limit, offset=offset)
            return count, [view_of(ScheduleView, row) for row in found]

    def of_organisation(self, org_id: str, query: ScheduleQuery, limit: int) -> list[ScheduleView]:
        """Like `list`, for a known organisation (NotFoundError else)."""
        with self.store.session() as session:
            get_organisation(session, org_id)
            _, found = rows.list_schedules(session, query, limit=limit)
            return [view_of(ScheduleView, row) for row in found]

    def get(self, schedule_id: uuid.UUID) -> ScheduleView:
        with self.store.session() as session:
            return view_of(ScheduleView, rows.get_schedule(session, schedule_id))

    def update(self, schedule_id: uuid.UUID, changes: Mapping[str, Any]) -> ScheduleView:
        with self.store.session() as session:
            return view_of(ScheduleView, rows.update_schedule(session, schedule_id, changes))

    def delete(self, schedule_id: uuid.UUID, organisation: str | None = None, scheduler_id: str | None = None) -> bool:
        with self.store.session() as session:
            return rows.delete_schedule(session, schedule_id, organisation=organisation, scheduler_id=scheduler_id)
