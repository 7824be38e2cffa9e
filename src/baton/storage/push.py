"""A push: one task into its queue, in the caller's transaction, decided by the admission rule
(`baton.core.admission`).

PostgreSQL pushes in one statement (`statements.push_postgresql`), which encodes the rule in SQL;
its answer is read here through `admit`. SQLite runs a short transaction of a few statements (its
writers are serialised): read the queue and any queued twin, `admit`, then reprioritise or insert.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.admission import Admission, admit, twin_queued
from baton.core.errors import ConflictError, NotFoundError
from baton.core.queueing import PushRequest, PushResult
from baton.storage import statements
from baton.storage.engine import on_postgresql

Executable = Session | Connection


def as_dict(row: Any) -> dict[str, Any]:
    return dict(row._mapping)


def push_params(request: PushRequest, now: datetime, data: Any = None) -> dict[str, Any]:
    """The push statements' parameters; `data` given: already encoded (the psycopg executor's JSON text)."""
    return {
        "queue_": request.queue,
        "id_": request.task_id or uuid.uuid4(),
        "schedule_id_": request.schedule_id,
        "priority_": request.priority,
        "hash_": request.hash,
        "data_": request.data if data is None else data,
        "now_": now,
    }


def id_conflict(request: PushRequest) -> ConflictError:
    return ConflictError(f"task '{request.task_id}' already exists")


def push_result(row: Any, request: PushRequest) -> PushResult:
    """Read the one-statement push's answer (PostgreSQL): see `statements.push_postgresql`."""
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
    """Queue a task: dedup by hash, maxsize, the fair tag, in the caller's transaction."""
    params = push_params(request, now)
    try:
        if on_postgresql(executable):
            row = executable.execute(statements.push_postgresql(request.on_duplicate, raw_data), params).first()
            return push_result(row, request)
        return _push_sqlite(executable, request, params, raw_data)
    except IntegrityError as exc:  # the only unique key a push can hit unhandled is a chosen task id
        raise id_conflict(request) from exc


def _push_sqlite(executable: Executable, request: PushRequest, params: dict[str, Any], raw: bool) -> PushResult:
    queue = executable.execute(statements.queue_for_push(), params).first()
    if queue is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    twin = request.hash is not None and executable.execute(statements.queued_twin(raw), params).first() is not None
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
        return PushResult("updated", as_dict(executable.execute(statements.reprioritise_twin(raw), params).one()))
    return PushResult("created", as_dict(executable.execute(statements.insert_task(raw), params).one()))
