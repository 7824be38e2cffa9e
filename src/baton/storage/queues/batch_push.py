"""The batched push: the tasks of one queue pushed as one after another would push them, in a few
statements (`push_many`, `BatchPush`). Each request is decided by the admission rule
(`baton.core.admission`) and tagged by the fair-queuing arithmetic (`baton.core.fairness`) against
the batch's state; a request the batch cannot plan falls back to a single push (`push.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from baton.core.admission import Admission, admit
from baton.core.errors import DuplicateTaskError, NotFoundError, QueueFullError
from baton.core.fairness import fair_step, fair_tag
from baton.core.model import TaskStatus
from baton.core.queueing import Outcome, PushRequest, PushResult
from baton.storage.engine import on_postgresql
from baton.storage.queues import push_statements, statements
from baton.storage.queues.push import Executable, as_dict, push


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
        queue = self.executable.execute(push_statements.queue_for_push(), {"queue_": name}).first()
        if queue is None:
            raise NotFoundError(f"queue '{name}' not found")
        self.queue = queue
        self.queued = int(queue.queued)
        self.clock = int(queue.last_key)
        self.step = fair_step(int(queue.weight))

    def _read_twins(self) -> None:
        hashes = sorted({request.hash for request in self.requests if request.hash is not None})
        if not hashes:
            return
        params = {"queue_": self.queue.id, "hashes_": hashes}
        for row in self.executable.execute(push_statements.queued_twins(), params):
            mapping = as_dict(row)
            fair_key = mapping.pop("fair_key")
            self.by_hash[mapping["hash"]] = _BatchTask(mapping["id"], mapping["priority"], fair_key, row=mapping)

    def _read_heads(self, priorities: Sequence[int]) -> None:
        params: dict[str, Any] = {"type_": self.queue.type}
        params.update({f"priority_{n}_": priority for n, priority in enumerate(priorities)})
        for row in self.executable.execute(push_statements.head_tags(len(priorities)), params):
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
        admission = admit(
            request.queue,
            enabled=self.queue.enabled,
            maxsize=int(self.queue.maxsize),
            queued=self.queued,
            twin=twin is not None,
            on_duplicate=request.on_duplicate,
            task_hash=request.hash,
        )
        if admission is Admission.REPRIORITISE:
            assert twin is not None
            self._move(twin, request.priority)
            twin.requests.append(index)
            return "updated", twin
        head = self._head(request.priority)
        tag = fair_tag(self.clock, self.step, head, self.queued)
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
        answered = {
            row.id: as_dict(row) for row in self.executable.execute(push_statements.insert_tasks(dialect), rows)
        }
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
            row.id: as_dict(row)
            for row in self.executable.execute(push_statements.reprioritise_tasks(len(tasks)), params)
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
