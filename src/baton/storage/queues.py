"""Queue operations on a SQLAlchemy session or connection: what the statements mean as results.

The same functions serve a scheduler pushing inside its ingest transaction, the SQLite executor of
the API, and tests. `executors.py` runs the same statements on psycopg's async pool for the API on
PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, TextClause, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.errors import (
    ConflictError,
    DuplicateTaskError,
    NotFoundError,
    QueueDisabledError,
    QueueFullError,
)
from baton.core.lifecycle import check_transition
from baton.core.model import TaskStatus
from baton.storage import statements
from baton.storage.engine import on_postgresql
from baton.storage.statements import OnDuplicate, PopTarget
from baton.storage.tables import IS_QUEUED, QUEUED_WITH_HASH, Task

Outcome = Literal["created", "updated", "duplicate"]
Executable = Session | Connection


@dataclass(frozen=True)
class PushRequest:
    queue: str
    priority: int
    data: dict[str, Any]
    hash: str | None = None
    schedule_id: str | None = None
    task_id: uuid.UUID | None = None
    # `reprioritise`: a queued task with this hash gets the new priority (Baton's rule);
    # `refuse`: it is left alone and the push is a duplicate (OpenKAT's rule).
    on_duplicate: OnDuplicate = "reprioritise"

    def params(self, now: datetime, data: Any = None) -> dict[str, Any]:
        return {
            "queue_": self.queue,
            "id_": self.task_id or uuid.uuid4(),
            "schedule_id_": self.schedule_id,
            "priority_": self.priority,
            "hash_": self.hash,
            "data_": self.data if data is None else data,
            "now_": now,
        }


@dataclass(frozen=True)
class PushResult:
    outcome: Outcome
    task: dict[str, Any]

    @property
    def created(self) -> bool:
        return self.outcome == "created"


def _mapping(row: Any) -> dict[str, Any]:
    return dict(row._mapping)


def id_conflict(exc: Exception, request: PushRequest) -> ConflictError:
    return ConflictError(f"task '{request.task_id}' already exists")


def twin_queued(task_id: uuid.UUID) -> DuplicateTaskError:
    return DuplicateTaskError(f"task '{task_id}' cannot be queued again: a task with its hash is queued already")


def push_result(row: Any, request: PushRequest) -> PushResult:
    """Read the one-statement push's answer (PostgreSQL): see `statements.push_postgresql`."""
    if row is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    mapping = dict(row if isinstance(row, dict) else row._mapping)
    if mapping["id"] is None:
        if not mapping["enabled"]:
            raise QueueDisabledError(f"queue '{request.queue}' is disabled")
        raise QueueFullError(f"queue '{request.queue}' is full (maxsize {mapping['maxsize']})")
    outcome = mapping.pop("outcome")
    for key in ("enabled", "maxsize", "queued"):
        mapping.pop(key)
    if outcome == "duplicate":
        raise DuplicateTaskError(f"a task with hash '{request.hash}' is already queued in '{request.queue}'")
    return PushResult(outcome, mapping)


def push(executable: Executable, request: PushRequest, now: datetime, raw_data: bool = False) -> PushResult:
    """Queue a task: dedup by hash, maxsize, the fair tag, in the caller's transaction."""
    params = request.params(now)
    try:
        if on_postgresql(executable):
            row = executable.execute(statements.push_postgresql(request.on_duplicate, raw_data), params).first()
            return push_result(row, request)
        return _push_sqlite(executable, request, params, raw_data)
    except IntegrityError as exc:  # the only unique key a push can hit unhandled is a chosen task id
        raise id_conflict(exc, request) from exc


def _push_sqlite(executable: Executable, request: PushRequest, params: dict[str, Any], raw: bool) -> PushResult:
    queue = executable.execute(statements.queue_for_push(), params).first()
    if queue is None:
        raise NotFoundError(f"queue '{request.queue}' not found")
    if not queue.enabled:
        raise QueueDisabledError(f"queue '{request.queue}' is disabled")
    if request.hash is not None:
        if request.on_duplicate == "reprioritise":
            twin = executable.execute(statements.reprioritise_twin(raw), params).first()
            if twin is not None:
                return PushResult("updated", _mapping(twin))
        elif executable.execute(statements.queued_twin(raw), params).first() is not None:
            raise DuplicateTaskError(f"a task with hash '{request.hash}' is already queued in '{request.queue}'")
    if queue.maxsize > 0 and queue.queued >= queue.maxsize:
        raise QueueFullError(f"queue '{request.queue}' is full (maxsize {queue.maxsize})")
    row = executable.execute(statements.insert_task(raw), params).one()
    return PushResult("created", _mapping(row))


def push_many(executable: Executable, requests: Sequence[PushRequest], now: datetime) -> list[PushResult]:
    """Queue the tasks of one queue as if pushed one after another in this order (dedup by hash,
    maxsize, the fair tag), in the caller's transaction; one result per request, in order.

    PostgreSQL: one statement for the lot. It is all or nothing: when the queue lacks room for every
    new task, nothing is pushed and QueueFullError is raised (it does not say which request did not
    fit: a caller that cares rolls back and pushes one at a time). SQLite: one push after another;
    an error leaves the earlier pushes to the caller's rollback. The results' tasks carry no `data`
    on PostgreSQL (the caller has it).
    """
    if not requests:
        return []
    if len({request.queue for request in requests}) != 1 or any(r.on_duplicate != "reprioritise" for r in requests):
        raise ValueError("push_many takes requests for one queue, with the 'reprioritise' rule")
    requests = [request if request.task_id else replace(request, task_id=uuid.uuid4()) for request in requests]
    if not on_postgresql(executable):
        return [push(executable, request, now) for request in requests]
    return _push_many_postgresql(executable, requests, now)


def _push_many_postgresql(executable: Executable, requests: Sequence[PushRequest], now: datetime) -> list[PushResult]:
    queue = requests[0].queue
    params = {"queue_": queue, "now_": now, "rows_": json.dumps(_batch_rows(requests))}
    try:
        answer = [dict(row) for row in executable.execute(_push_many_statement(), params).mappings()]
    except IntegrityError as exc:  # as in `push`: only a chosen task id can collide unhandled
        raise ConflictError(f"a task id of the batch for '{queue}' exists already") from exc
    if not answer:
        raise NotFoundError(f"queue '{queue}' not found")
    if not answer[0]["enabled"]:
        raise QueueDisabledError(f"queue '{queue}' is disabled")
    if not answer[0]["room"]:
        raise QueueFullError(f"queue '{queue}' is full (maxsize {answer[0]['maxsize']})")
    tasks = [_task_of(row) for row in answer if row["id"] is not None]
    by_id = {task["id"]: task for task in tasks}
    by_hash = {task["hash"]: task for task in tasks if task["hash"] is not None}
    results = []
    for request in requests:
        task = by_id.get(request.task_id)
        if task is not None:
            results.append(PushResult(task["outcome"], task))
        elif request.hash in by_hash:  # a queued twin (maybe an earlier request of this batch) got its priority
            results.append(PushResult("updated", by_hash[request.hash]))
        else:
            raise RuntimeError(f"push_many: no answer for task '{request.task_id}'")
    for task in tasks:
        del task["outcome"]
    return results


def _batch_rows(requests: Sequence[PushRequest]) -> list[dict[str, Any]]:
    """The rows the statement reads, in order, one per hash: a request whose hash an earlier one
    has is that one's twin, so it only sets the priority (the last one wins, as one by one)."""
    rows: list[dict[str, Any]] = []
    by_hash: dict[str, dict[str, Any]] = {}
    for request in requests:
        if request.hash is not None and request.hash in by_hash:
            by_hash[request.hash]["priority"] = request.priority
            continue
        row = {
            "k": len(rows) + 1,
            "id": str(request.task_id),
            "priority": request.priority,
            "hash": request.hash,
            "data": request.data,
            "schedule_id": request.schedule_id,
        }
        rows.append(row)
        if request.hash is not None:
            by_hash[request.hash] = row
    return rows


QUEUE_ANSWER = ("enabled", "maxsize", "queued", "room")


def _task_of(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key not in QUEUE_ANSWER}


# `task_columns()` without `data` (the caller has it).
TASK_COLUMNS = ", ".join(
    [
        "id",
        "scheduler_id",
        "schedule_id",
        "organisation",
        "type",
        "priority",
        "status",
        "hash",
        "attempts",
        "reason",
        "created_at",
        "modified_at",
    ]
)


@cache
def _push_many_statement() -> TextClause:
    """`push_postgresql` for a batch (`:rows_`, a JSON array). New tasks are numbered r = 1..n in
    batch order; pushed one by one, task r would get the tag max(clock + step, head of its priority)
    with the clock advanced by the tasks before it, which unrolls to
        tag(r) = r * step + max(clock, max over new tasks j <= r first at their priority of (head(j) - j * step))
    (a later task at a priority already used in the batch never starts at the head: the clock is past
    it). Heads are read as the statement starts (as are the twins, whose priorities change here)."""
    step = f"({statements.FAIR_UNIT} / q.weight)"
    return text(f"""
WITH queue AS (
  SELECT s.id, s.organisation, s.type, s.maxsize, s.enabled, o.weight,
         coalesce(c.queued, 0) AS queued, coalesce(c.last_key, 0) AS last_key
  FROM schedulers s
  JOIN organisations o ON o.id = s.organisation
  CROSS JOIN (SELECT sum(queued) AS queued, max(last_key) AS last_key
              FROM queue_counters WHERE scheduler_id = :queue_) c
  WHERE s.id = :queue_
),
batch AS (
  SELECT * FROM jsonb_to_recordset(CAST(:rows_ AS jsonb))
    AS b(k int, id uuid, priority int, hash text, data jsonb, schedule_id text)
),
twin AS (
  UPDATE tasks t SET priority = b.priority, modified_at = :now_
  FROM batch b
  WHERE t.scheduler_id = :queue_ AND t.hash = b.hash AND t.status = 'queued'
    AND EXISTS (SELECT 1 FROM queue WHERE enabled)
  RETURNING {", ".join(f"t.{name}" for name in TASK_COLUMNS.split(", "))}, 'updated' AS outcome
),
fresh AS (
  SELECT b.*, row_number() OVER (ORDER BY b.k) AS r,
         row_number() OVER (PARTITION BY b.priority ORDER BY b.k) = 1 AS first_at_priority
  FROM batch b
  WHERE NOT EXISTS (SELECT 1 FROM twin WHERE twin.hash = b.hash)
),
head AS (
  SELECT p.priority, coalesce(
    (SELECT min(t.fair_key) FROM tasks t
     WHERE t.status = 'queued' AND t.type = q.type AND t.priority = p.priority), 0) AS fair_key
  FROM (SELECT DISTINCT priority FROM fresh) p CROSS JOIN queue q
),
room AS (
  SELECT q.enabled AND (q.maxsize = 0 OR q.queued + (SELECT count(*) FROM fresh) <= q.maxsize) AS room
  FROM queue q
),
inserted AS (
  INSERT INTO tasks (id, scheduler_id, schedule_id, organisation, type, priority, status, hash, data,
                     fair_key, attempts, created_at, modified_at)
  SELECT f.id, q.id, f.schedule_id, q.organisation, q.type, f.priority, 'queued', f.hash, f.data,
         f.r * {step} + greatest(q.last_key, max(CASE WHEN f.first_at_priority THEN h.fair_key - f.r * {step} END)
                                               OVER (ORDER BY f.r)),
         0, :now_, :now_
  FROM fresh f JOIN head h ON h.priority = f.priority CROSS JOIN queue q
  WHERE (SELECT room FROM room)
  ORDER BY f.r
  ON CONFLICT (scheduler_id, hash) WHERE {QUEUED_WITH_HASH}
    DO UPDATE SET priority = EXCLUDED.priority, modified_at = EXCLUDED.modified_at
  RETURNING {TASK_COLUMNS}, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS outcome
)
SELECT q.enabled, q.maxsize, q.queued, (SELECT room FROM room) AS room, task.*
FROM queue q
LEFT JOIN (SELECT * FROM twin UNION ALL SELECT * FROM inserted) task ON true
""")


def pop(
    executable: Executable,
    target: PopTarget,
    *,
    limit: int,
    now: datetime,
    condition: ColumnElement[bool] | None = None,
    caps: bool = False,
    raw_data: bool = False,
) -> list[dict[str, Any]]:
    """Hand out up to `limit` tasks, best first; each task to one caller only, whatever the number of
    concurrent callers (PostgreSQL: SKIP LOCKED; SQLite: writers are serialised)."""
    dialect: statements.Dialect = "postgresql" if on_postgresql(executable) else "sqlite"
    statement = statements.pop(target, dialect, condition=condition, caps=caps, raw_data=raw_data)
    params = {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now}
    rows = [_mapping(row) for row in executable.execute(statement, params)]
    return sort_popped(rows, target)


def sort_popped(rows: Sequence[dict[str, Any]], target: PopTarget) -> list[dict[str, Any]]:
    """RETURNING comes in no particular order: put a batch back in hand-out order."""
    if target.type is not None and target.fair:
        return sorted(rows, key=lambda row: (row["priority"], row["fair_key"], row["seq"]))
    return sorted(rows, key=lambda row: (row["priority"], row["seq"]))


def change_status(
    executable: Executable, task_id: uuid.UUID, requested: TaskStatus, now: datetime, raw_data: bool = False
) -> dict[str, Any]:
    """Move a task along its lifecycle; an illegal move raises InvalidTransitionError (409)."""
    try:
        row = executable.execute(statements.change_status(requested, raw_data), {"id_": task_id, "now_": now}).first()
    except IntegrityError as exc:  # back to queued while a task with its hash is queued already
        raise twin_queued(task_id) from exc
    if row is not None:
        return _mapping(row)
    current = executable.execute(statements.task_status(), {"id_": task_id}).scalar()
    if current is None:
        raise NotFoundError(f"task '{task_id}' not found")
    check_transition(TaskStatus(current), requested)
    # Allowed now, refused a moment ago: another client moved the task in between.
    raise ConflictError(f"task '{task_id}' changed while being updated (now '{current}'); retry")


def queue_counts(executable: Executable, scheduler_id: str | None = None) -> dict[str, tuple[int, int]]:
    """(queued, in flight) per queue id, from the counters (no scan of the tasks)."""
    rows = executable.execute(statements.queue_counts(scheduler_id))
    return {row.scheduler_id: (int(row.queued or 0), int(row.in_flight or 0)) for row in rows}


def recount(executable: Executable, scheduler_id: str) -> tuple[int, int]:
    """Count a queue the slow way (tests compare it with the counters)."""
    queued = executable.execute(
        select(func.count()).select_from(Task).where(Task.scheduler_id == scheduler_id, IS_QUEUED)
    ).scalar_one()
    in_flight = executable.execute(
        select(func.count())
        .select_from(Task)
        .where(Task.scheduler_id == scheduler_id, Task.status.in_(["dispatched", "running"]))
    ).scalar_one()
    return int(queued), int(in_flight)
