"""Queue operations on a SQLAlchemy session or connection: what the statements mean as results.

The same functions serve a scheduler pushing inside its ingest transaction, the SQLite executor of
the API, and tests. `executors.py` runs the same statements on psycopg's async pool for the API on
PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, Update, func, select
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
from baton.storage.tables import IS_QUEUED, Task

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
    """Queue the tasks of one queue exactly as pushing them one after another in this order would
    (dedup by hash, maxsize, the fair tags, the counters, the answers), in the caller's transaction;
    one result per request, in order. An error is raised at the request that would raise it, the
    earlier ones written, for the caller's rollback.

    A few statements for the whole batch, not one per task: the queue's clock and backlog, the heads
    of the batch's priorities and the queued twins of its hashes are read once, every tag is computed
    here as the push statement would compute it (the state evolving task by task), and one insert
    and one update write the batch. See `BatchPush`.
    """
    if not requests:
        return []
    if len({request.queue for request in requests}) != 1:
        raise ValueError("push_many takes requests for one queue")
    requests = [request if request.task_id else replace(request, task_id=uuid.uuid4()) for request in requests]
    return BatchPush(executable, requests, now).run()


@dataclass
class _BatchTask:
    """A task the batch touches: a queued twin it found, or one it creates."""

    id: uuid.UUID
    priority: int
    fair_key: int
    new_row: dict[str, Any] | None = None  # to be inserted; None: in the database
    requests: list[int] = field(default_factory=list)  # the requests that created or reprioritised it
    row: dict[str, Any] | None = None  # as the database last answered


class BatchPush:
    """Pushes of one queue, planned here and written in a few statements (`push_many`).

    The state a push reads, and how each push changes it:
    - the queue's `queued` count: +1 per new task (a reprioritised twin keeps its status);
    - its clock (`last_key`): the largest tag handed out;
    - the head of a priority (the smallest queued tag at the queue's type): a new task's tag is never
      below it, so it only changes when the priority had no task (then it is that tag), or when a
      twin moves in (its tag may be smaller) or out (if it was the head, the next one is unknown
      here: the batch so far is written and the head read again, which is rare);
    - the queued twin of a hash: found in the database, or created by an earlier request.
    Writes are deferred: a flush inserts the new tasks (in request order, so `seq` is too) and gives
    moved twins their priority. Other transactions' pushes are not serialised with the batch, just as
    they are not with a series of single pushes; a twin queued meanwhile by one of them makes the
    insert skip that row, and its requests are then pushed again one at a time.
    """

    def __init__(self, executable: Executable, requests: Sequence[PushRequest], now: datetime) -> None:
        self.executable = executable
        self.requests = requests
        self.now = now
        self.postgresql = on_postgresql(executable)
        self.by_hash: dict[str, _BatchTask] = {}
        self.heads: dict[int, int | None] = {}  # a priority missing: its head is not known
        self.results: list[tuple[Outcome, _BatchTask] | PushResult] = []
        self.pending: list[_BatchTask] = []  # created, not inserted yet
        self.moved: dict[uuid.UUID, _BatchTask] = {}

    def run(self) -> list[PushResult]:
        self._read_queue()
        self._read_twins()
        self._read_heads(sorted({request.priority for request in self.requests}))
        for request in self.requests:
            try:
                self.results.append(self._plan(request))
            except (DuplicateTaskError, QueueFullError):
                self._flush()
                raise
        self._flush()
        return [self._result(index, result) for index, result in enumerate(self.results)]

    # -- reading ------------------------------------------------------------------------------------

    def _read_queue(self) -> None:
        name = self.requests[0].queue
        queue = self.executable.execute(statements.queue_for_push(), {"queue_": name}).first()
        if queue is None:
            raise NotFoundError(f"queue '{name}' not found")
        if not queue.enabled:
            raise QueueDisabledError(f"queue '{name}' is disabled")
        self.queue = queue
        self.queued = int(queue.queued)
        self.clock = int(queue.last_key)
        self.step = statements.FAIR_UNIT // int(queue.weight)  # the statement's integer division

    def _read_twins(self) -> None:
        hashes = sorted({request.hash for request in self.requests if request.hash is not None})
        if not hashes:
            return
        params = {"queue_": self.queue.id, "hashes_": hashes}
        for row in self.executable.execute(statements.queued_twins(), params):
            mapping = _mapping(row)
            fair_key = mapping.pop("fair_key")
            self.by_hash[mapping["hash"]] = _BatchTask(mapping["id"], mapping["priority"], fair_key, row=mapping)

    def _read_heads(self, priorities: Sequence[int]) -> None:
        params: dict[str, Any] = {"type_": self.queue.type}
        params.update({f"priority_{n}_": priority for n, priority in enumerate(priorities)})
        for row in self.executable.execute(statements.head_tags(len(priorities)), params):
            self.heads[row.priority] = None if row.head is None else int(row.head)

    def _head(self, priority: int) -> int:
        if priority not in self.heads:
            self._flush()
            self._read_heads([priority])
        head = self.heads[priority]
        return 0 if head is None else head

    # -- planning -----------------------------------------------------------------------------------

    def _plan(self, request: PushRequest) -> tuple[Outcome, _BatchTask]:
        """What pushing this request alone would do now, applied to the batch's state."""
        index = len(self.results)
        twin = self.by_hash.get(request.hash) if request.hash is not None else None
        if twin is not None:
            if request.on_duplicate == "refuse":
                raise DuplicateTaskError(f"a task with hash '{request.hash}' is already queued in '{request.queue}'")
            self._move(twin, request.priority)
            twin.requests.append(index)
            return "updated", twin
        maxsize = int(self.queue.maxsize)
        if maxsize > 0 and self.queued >= maxsize:
            raise QueueFullError(f"queue '{request.queue}' is full (maxsize {maxsize})")
        head = self._head(request.priority)
        tag = max(min(self.clock + self.step, head + self.queued * self.step), head)
        assert request.task_id is not None
        task = _BatchTask(request.task_id, request.priority, tag, new_row=self._new_row(request, tag), requests=[index])
        self.pending.append(task)
        self.queued += 1
        self.clock = max(self.clock, tag)
        self._enter(request.priority, tag)
        if request.hash is not None:
            self.by_hash[request.hash] = task
        return "created", task

    def _move(self, task: _BatchTask, priority: int) -> None:
        if priority != task.priority:
            head = self.heads.get(task.priority)
            if head is not None and task.fair_key <= head:
                del self.heads[task.priority]  # the head left: the next one is in the database
            self._enter(priority, task.fair_key)
            task.priority = priority
        if task.new_row is not None:
            task.new_row["priority"] = priority
        else:
            self.moved[task.id] = task

    def _enter(self, priority: int, fair_key: int) -> None:
        if priority in self.heads:
            head = self.heads[priority]
            self.heads[priority] = fair_key if head is None else min(head, fair_key)

    def _new_row(self, request: PushRequest, tag: int) -> dict[str, Any]:
        return {
            "id": request.task_id,
            "scheduler_id": self.queue.id,
            "schedule_id": request.schedule_id,
            "organisation": self.queue.organisation,
            "type": self.queue.type,
            "priority": request.priority,
            "status": TaskStatus.QUEUED.value,
            "hash": request.hash,
            "data": request.data,
            "fair_key": tag,
            "attempts": 0,
            "created_at": self.now,
            "modified_at": self.now,
        }

    # -- writing ------------------------------------------------------------------------------------

    def _flush(self) -> None:
        if self.pending:
            self._insert(self.pending)
            self.pending = []
        if self.moved:
            self._reprioritise(list(self.moved.values()))
            self.moved = {}

    def _insert(self, tasks: list[_BatchTask]) -> None:
        dialect: statements.Dialect = "postgresql" if self.postgresql else "sqlite"
        rows = [task.new_row for task in tasks if task.new_row is not None]
        answered = {row.id: _mapping(row) for row in self.executable.execute(statements.insert_tasks(dialect), rows)}
        skipped: list[_BatchTask] = []
        for task in tasks:
            task.new_row = None
            task.row = answered.get(task.id)
            if task.row is None:
                skipped.append(task)
        for task in skipped:
            self._push_one_by_one(task)

    def _push_one_by_one(self, task: _BatchTask) -> None:
        """The insert skipped this task (another transaction queued its twin meanwhile, or its id is
        taken): its requests are pushed as single pushes, which report what happened."""
        digest = self.requests[task.requests[0]].hash
        if digest is not None and self.by_hash.get(digest) is task:
            del self.by_hash[digest]  # a later request with its hash is planned as new, and skipped too
        for index in task.requests:
            self.results[index] = push(self.executable, self.requests[index], self.now)
        task.requests = []

    def _reprioritise(self, tasks: list[_BatchTask]) -> None:
        params: dict[str, Any] = {"now_": self.now}
        for n, task in enumerate(tasks):
            params[f"id_{n}_"] = task.id
            params[f"priority_{n}_"] = task.priority
        answered = {
            row.id: _mapping(row) for row in self.executable.execute(statements.reprioritise_tasks(len(tasks)), params)
        }
        for task in tasks:
            task.row = answered[task.id]

    def _result(self, index: int, planned: tuple[Outcome, _BatchTask] | PushResult) -> PushResult:
        if isinstance(planned, PushResult):
            return planned
        outcome, task = planned
        assert task.row is not None
        # Every request leaves the task as the last one does, but for the priority it asked for.
        return PushResult(outcome, {**task.row, "priority": self.requests[index].priority})


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
    if condition is None:
        statement = statements.plain_pop(target.queue is not None, target.fair, dialect, caps, raw_data)
    else:
        statement = statements.pop(target, dialect, condition=condition, caps=caps, raw_data=raw_data)
    return run_pop(executable, statement, target, limit=limit, now=now)


def run_pop(
    executable: Executable, statement: Update, target: PopTarget, *, limit: int, now: datetime
) -> list[dict[str, Any]]:
    """Run a pop statement of `statements.pop` built for `target`'s kind."""
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
