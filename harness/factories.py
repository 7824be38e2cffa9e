"""Factories: organisations, tasks pushed and popped in one call, on any store."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import insert

from baton.core.model import SchedulerState, SchedulerType, TaskStatus, scheduler_id_for, utcnow
from baton.core.queueing import PopTarget, PushRequest, PushResult
from baton.core.settings import LeaseSettings, Settings, TimingSettings
from baton.core.tokens import Scope
from baton.service.tokens import create_token
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.tables import Organisation, Scheduler


def fast_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings with timings short enough for tests (poll 50 ms, lease renewals and heartbeats every
    200 ms, reconcile 100 ms; leases of 8 s with a 5 s renew deadline, generous for a loaded CI)."""
    timing = TimingSettings(
        poll_interval_seconds=overrides.pop("poll_interval_seconds", 0.05),
        heartbeat_timeout_seconds=overrides.pop("heartbeat_timeout_seconds", 30.0),
        reconcile_interval_seconds=overrides.pop("reconcile_interval_seconds", 0.1),
    )
    leases = LeaseSettings(
        retry_period_seconds=overrides.pop("retry_period_seconds", 0.2),
        renew_deadline_seconds=overrides.pop("renew_deadline_seconds", 5.0),
        lease_seconds=overrides.pop("lease_seconds", 8.0),
    )
    return Settings(database_url=database_url, timing=timing, leases=leases, **overrides)


def add_organisation(store: Store, org_id: str, maxsize: int = 100, **fair: Any) -> None:
    with store.session() as session:
        create_organisation(session, org_id, org_id.title(), maxsize=maxsize, **fair)


def push(
    store: Store,
    queue: str,
    priority: int = 1,
    data: dict[str, Any] | None = None,
    task_hash: str | None = None,
    **request: Any,
) -> PushResult:
    with store.session() as session:
        return queues.push(
            session, PushRequest(queue=queue, priority=priority, data=data or {}, hash=task_hash, **request), utcnow()
        )


def pop(
    store: Store,
    queue: str | None = None,
    task_type: str | None = None,
    limit: int = 1,
    fair: bool = True,
    **options: Any,
) -> list[dict[str, Any]]:
    target = PopTarget(queue=queue) if queue is not None else PopTarget(type=task_type, fair=fair)
    with store.session() as session:
        return queues.pop(session, target, limit=limit, now=utcnow(), **options)


def finish(store: Store, task_id: uuid.UUID | str, status: TaskStatus = TaskStatus.COMPLETED) -> dict[str, Any]:
    with store.session() as session:
        return queues.change_status(session, uuid.UUID(str(task_id)), status, utcnow())


def named_tokens(store: Store, scopes_by_name: dict[str, list[Scope]]) -> dict[str, str]:
    """A token per name, with its scopes: {name: token}."""
    with store.session() as session:
        return {name: create_token(session, name, scopes) for name, scopes in scopes_by_name.items()}


def bearer(token: str) -> dict[str, str]:
    """The header that presents `token` to the API."""
    return {"Authorization": f"Bearer {token}"}


def add_organisations(store: Store, ids: list[str], maxsize: int = 0) -> None:
    """Many organisations and their three queues each, in two multi-row statements (an estate of
    10,000 in a second or so, on either backend)."""
    now = utcnow()
    with store.session() as session:
        session.execute(insert(Organisation), [{"id": org, "name": org, "created_at": now, "weight": 1} for org in ids])
        session.execute(
            insert(Scheduler),
            [
                {
                    "id": scheduler_id_for(kind, org),
                    "organisation": org,
                    "type": kind.value,
                    "maxsize": maxsize,
                    "enabled": True,
                    "state": SchedulerState.STOPPED.value,
                    "created_at": now,
                }
                for org in ids
                for kind in SchedulerType
            ],
        )
