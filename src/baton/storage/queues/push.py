"""A push: one task into its queue, in the caller's transaction, decided by the admission rule
(`baton.core.admission`).

PostgreSQL pushes in one statement (`push_statements.push_postgresql`), which encodes the rule in SQL;
its answer is read here through `admit`. SQLite runs a short transaction of a few statements (its
writers are serialised): read the queue and any queued twin, `admit`, then reprioritise or insert.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.admission import Admission, admit, twin_queued
from baton.core.errors import NotFoundError, TaskIdTakenError
from baton.core.queueing import PushRequest, PushResult, PushSchedule
from baton.storage.engine import on_postgresql
from baton.storage.queues import push_statements
from baton.storage.scheduling.boefje_runs import record_boefje_run
from baton.storage.scheduling.boefje_schedules import KeptSchedule, keep_schedules
from baton.storage.tables import Task

Executable = Session | Connection


def as_dict(row: Any) -> dict[str, Any]:
    return dict(row._mapping)


def push_params(request: PushRequest, now: datetime, encode: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """The push statements' parameters; `encode`: how JSON documents are sent (the psycopg link sends
    JSON text), else as they are."""
    params = {
        "queue_": request.queue,
        "id_": request.task_id or uuid.uuid4(),
        "schedule_id_": request.schedule_id,
        "priority_": request.priority,
        "hash_": request.hash,
        "data_": request.data if encode is None else encode(request.data),
        "now_": now,
    }
    schedule = request.schedule
    if schedule is not None:
        params.update(
            sid_=uuid.uuid4(),
            shash_=schedule.hash,
            sdata_=schedule.data if encode is None else encode(schedule.data),
            scron_=schedule.cron,
            sdeadline_=schedule.deadline_at,
            rboefje_=schedule.boefje_id if _fits_a_run(schedule) else None,
            robject_=schedule.object_key if _fits_a_run(schedule) else None,
        )
    return params


def _fits_a_run(schedule: PushSchedule) -> bool:
    """Whether its (boefje, object) fits boefje_runs' keys: a pair beyond them is never planned either."""
    return schedule.object_key is not None and len(schedule.boefje_id) <= 128 and len(schedule.object_key) <= 512


def id_conflict(request: PushRequest) -> TaskIdTakenError:
    return TaskIdTakenError(f"task '{request.task_id}' already exists")


def push_result(row: Any, request: PushRequest) -> PushResult:
    """Read the one-statement push's answer (PostgreSQL): see `push_statements.push_postgresql`."""
    if row is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    mapping = dict(row if isinstance(row, dict) else row._mapping)
    outcome = mapping.pop("outcome")
    enabled, maxsize, queued = (mapping.pop(key) for key in ("enabled", "maxsize", "queued"))
    admit(
        request.queue,
        enabled=enabled,
        maxsize=maxsize,
        queued=queued,
        twin=outcome in ("updated", "duplicate"),
        on_duplicate=request.on_duplicate,
        task_hash=request.hash,
    )
    if outcome is None:
        # Admitted, yet nothing inserted: `refuse`'s ON CONFLICT DO NOTHING met a twin that another
        # transaction queued after this statement's snapshot.
        raise twin_queued(request.queue, request.hash)
    return PushResult(outcome, mapping)


def push(executable: Executable, request: PushRequest, now: datetime, raw_data: bool = False) -> PushResult:
    """Queue a task: dedup by hash, maxsize, the fair tag, and the schedule it carries, in the caller's
    transaction."""
    params = push_params(request, now)
    scheduled = request.schedule is not None
    try:
        if on_postgresql(executable):
            statement = push_statements.push_postgresql(request.on_duplicate, raw_data, scheduled)
            return push_result(executable.execute(statement, params).first(), request)
        result = _push_sqlite(executable, request, params, raw_data)
    except IntegrityError as exc:  # the only unique key a push can hit unhandled is a chosen task id
        raise id_conflict(request) from exc
    if request.schedule is not None:
        _keep_schedule(executable, request.schedule, result, now)
    return result


def _keep_schedule(executable: Executable, schedule: PushSchedule, result: PushResult, now: datetime) -> None:
    """SQLite: what PostgreSQL's scheduled push writes in its one statement, in the same transaction."""
    task = result.task
    organisation = task["organisation"]
    if _fits_a_run(schedule):
        assert schedule.object_key is not None
        record_boefje_run(executable, organisation, schedule.boefje_id, schedule.object_key, now)  # type: ignore[arg-type]
    kept = KeptSchedule(organisation, schedule.hash, schedule.data, schedule.deadline_at, schedule.cron)
    schedule_id = keep_schedules(executable, [kept], now).get(schedule.hash)  # type: ignore[arg-type]
    if schedule_id is not None:
        executable.execute(update(Task).where(Task.id == task["id"]).values(schedule_id=str(schedule_id)))
        task["schedule_id"] = str(schedule_id)


def _push_sqlite(executable: Executable, request: PushRequest, params: dict[str, Any], raw: bool) -> PushResult:
    queue = executable.execute(push_statements.queue_for_push(), params).first()
    if queue is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    twin = request.hash is not None and executable.execute(push_statements.queued_twin(raw), params).first() is not None
    admission = admit(
        request.queue,
        enabled=queue.enabled,
        maxsize=queue.maxsize,
        queued=queue.queued,
        twin=twin,
        on_duplicate=request.on_duplicate,
        task_hash=request.hash,
    )
    if admission is Admission.REPRIORITISE:
        return PushResult("updated", as_dict(executable.execute(push_statements.reprioritise_twin(raw), params).one()))
    return PushResult("created", as_dict(executable.execute(push_statements.insert_task(raw), params).one()))
