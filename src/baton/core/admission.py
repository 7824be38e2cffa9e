"""The admission rule: may a task enter its queue, and how.

One rule for every way a task is put in a queue: a push on either backend, a batched push (tasks
that schedulers make go through these two), and an operator's requeue.

1. A disabled queue takes nothing: 409 (`QueueDisabledError`).
2. A task whose hash is queued in the queue already is not doubled: with `reprioritise` (Baton's
   rule) the queued twin takes the new priority, with `refuse` (OpenKAT's rule, and a requeue) the
   push is refused, 409 (`DuplicateTaskError`).
3. A queue holding `maxsize` queued tasks (0: no limit) takes no new one: 429 (`QueueFullError`).
   A twin that takes a new priority does not add a task, so a full queue still reprioritises.

The PostgreSQL push decides the same in SQL, in its one statement (`storage/queues/statements.py`,
`push_postgresql`); its answer is read through `admit` (`storage/queues/push.py`), and an integration test
checks that the two agree case by case.
"""

from __future__ import annotations

import enum
from typing import Literal

from baton.core.errors import DuplicateTaskError, QueueDisabledError, QueueFullError

OnDuplicate = Literal["reprioritise", "refuse"]


class Admission(enum.StrEnum):
    CREATE = "create"  # a new queued task
    REPRIORITISE = "reprioritise"  # the queued twin takes the new priority; no task is added


def twin_queued(queue: str, task_hash: str | None) -> DuplicateTaskError:
    """The refusal of a task whose hash is queued in `queue` already (also raised where the unique
    index, not the rule, finds the twin: a race the rule's read could not see)."""
    return DuplicateTaskError(f"a task with hash '{task_hash}' is already queued in '{queue}'")


def is_full(maxsize: int, queued: int) -> bool:
    return maxsize > 0 and queued >= maxsize


def admit(
    queue: str,
    *,
    enabled: bool,
    maxsize: int,
    queued: int,
    twin: bool,
    on_duplicate: OnDuplicate,
    task_hash: str | None = None,
) -> Admission:
    """What putting a task (with `task_hash`) into `queue` does, given the queue's state (`twin`: a
    task with that hash is queued there): CREATE or REPRIORITISE, or the error it is refused with
    (see the module's description)."""
    if not enabled:
        raise QueueDisabledError(f"queue '{queue}' is disabled")
    if twin:
        if on_duplicate == "reprioritise":
            return Admission.REPRIORITISE
        raise twin_queued(queue, task_hash)
    if is_full(maxsize, queued):
        raise QueueFullError(f"queue '{queue}' is full (maxsize {maxsize})")
    return Admission.CREATE
