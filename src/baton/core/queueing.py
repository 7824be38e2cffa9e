"""What a pop and a push ask for, what they answer, and which pop runs: the words the API, the services,
the schedulers and storage share.

A pop is one `PopRequest`; `plan_pop` is the one place that decides how it runs (see there). A push is one
`PushRequest`; the admission rule (`core/admission.py`) decides whether it enters its queue.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from baton.core.admission import OnDuplicate
from baton.core.deduplication import pops_together, target_type
from baton.core.filters import FilterTree

Outcome = Literal["created", "updated", "duplicate"]


class TaskRow(TypedDict):
    """One task as storage returns it. `data` is JSON text where the answer passes it through untouched
    (the API), else the parsed document."""

    id: uuid.UUID
    scheduler_id: str
    schedule_id: str | None
    organisation: str
    type: str
    priority: int
    status: str
    hash: str | None
    data: Any
    attempts: int
    reason: str | None
    created_at: datetime
    modified_at: datetime


# A task's public columns, in this order: what every statement returns about a task and every answer
# shows (with the queue's id).
TASK_FIELDS: tuple[str, ...] = tuple(TaskRow.__annotations__)


@dataclass(frozen=True)
class PopTarget:
    """One queue (`queue` = its id), or every queue of a type (`type`) in fair or strict order."""

    queue: str | None = None
    type: str | None = None
    fair: bool = True

    def __post_init__(self) -> None:
        if (self.queue is None) == (self.type is None):
            raise ValueError("a pop targets either one queue or one type")


@dataclass(frozen=True)
class PopRequest:
    """One pop as a client asked for it: up to `limit` tasks of `target` matching `filters`; with `wait`
    (seconds), an empty answer waits for a task (long-poll); with an idempotency `key`, a retry answers
    what the first attempt took (core/receipts.py)."""

    target: PopTarget
    limit: int = 1
    filters: FilterTree | None = None
    wait: float = 0.0
    key: str | None = None


@dataclass(frozen=True)
class PopShape:
    """The statement a pop runs, without its parameters: compiled once per shape. `together`: a boefje
    pop that hands out a deduplication group (core/deduplication.py); `caps`: skips queues whose
    organisation has its `max_in_flight` out."""

    together: bool
    by_queue: bool
    fair: bool
    caps: bool


@dataclass(frozen=True)
class PopPlan:
    """How one pop runs. `shape`: its statement. `filters`: compiled for this pop (not a statement kept
    compiled). `keyed`: with an idempotency key, in a transaction that remembers it. `batched`: shares a
    statement with the concurrent pops of its target (storage/queues/popbatch.py)."""

    shape: PopShape
    filters: FilterTree | None
    keyed: bool
    batched: bool

    @property
    def precompiled(self) -> bool:
        """One statement compiled once, sent as it is (on PostgreSQL: the API's own connection pool)."""
        return self.filters is None and not self.keyed


def plan_pop(request: PopRequest, *, caps: bool, deduplicate: bool, batching: bool) -> PopPlan:
    """Which pop runs: the one decision.

    - A boefje pop of more than one task with deduplication on hands out a deduplication group together
      (`together`), unless it carries a key (a keyed pop is the plain pop, remembered).
    - Filters are compiled for the pop; a key makes it a transaction of its own (storage/queues/receipts.py).
    - Only a plain pop without filters, key or caps is batched with its target's concurrent pops (with
      caps each pop counts the organisation's tasks in flight itself; a group has its own head)."""
    target = request.target
    together = request.key is None and pops_together(target_type(target.queue, target.type), request.limit, deduplicate)
    shape = PopShape(together=together, by_queue=target.queue is not None, fair=target.fair, caps=caps)
    plain = request.filters is None and request.key is None and not together
    return PopPlan(shape, request.filters, request.key is not None, batched=batching and plain and not caps)


@dataclass(frozen=True)
class PushSchedule:
    """The rescan schedule a boefje task pushed from outside (rocky's manual run) gets, written with the
    task: created or refreshed for the job's hash, due at `deadline_at` (the plugin's `cron` copied); and
    the run of (`boefje_id`, `object_key`) recorded now, so the grace period counts from it."""

    hash: str
    data: dict[str, Any]
    deadline_at: datetime
    cron: str | None
    boefje_id: str
    object_key: str | None


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
    # A boefje task's schedule, written in the same statement (PostgreSQL) or transaction (SQLite).
    schedule: PushSchedule | None = None


@dataclass(frozen=True)
class PushResult:
    outcome: Outcome
    task: dict[str, Any]

    @property
    def created(self) -> bool:
        return self.outcome == "created"
