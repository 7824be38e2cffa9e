"""Pop receipts: every pop stamps the tasks it hands out with a receipt, the id of that one answer.

A pop whose answer never reached its client (Baton answered an error, or the commit's outcome is
unknown: the connection broke during COMMIT, or the answer was given up at the request's deadline)
leaves its receipt *to settle*: once the database answers again, the receipt's tasks still
`dispatched` go back to `queued`, in the place they had (same priority, same position). A task a
client has reported on (any status change) is not the receipt's to settle any more, nor is one a
retried pop delivered again under a new receipt.

An idempotency key names a pop's attempts: the same key (per queue or type) within
BATON_POP_RECEIPT_SECONDS answers the tasks still dispatched under the first attempt's receipt,
instead of new ones, as Amazon SQS's ReceiveRequestAttemptId does. Those tasks are stamped with the
new attempt's receipt, so settling the old one leaves them alone.

The rules here are pure: the key's shape, where a key applies and until when, and what a settlement
names. Storage (`storage/queues/receipts.py`) writes them; the queue service decides when.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from baton.core.queueing import PopTarget

KEY_MAX_LENGTH = 200
KEY_HEADER = "Idempotency-Key"
KEY_PARAMETER = "idempotency_key"


def key_problem(key: str) -> str | None:
    """Why `key` cannot be an idempotency key, or None: 1 to 200 printable ASCII characters."""
    if not key:
        return "must not be empty"
    if len(key) > KEY_MAX_LENGTH:
        return f"at most {KEY_MAX_LENGTH} characters (got {len(key)})"
    if not all(" " <= char <= "~" for char in key):
        return "printable ASCII characters only"
    return None


def key_scope(target: PopTarget) -> str:
    """Where a key applies: one queue (`queue:boefje-acme`) or one type (`type:boefje`); the same key
    on another queue is another pop."""
    return f"queue:{target.queue}" if target.queue is not None else f"type:{target.type}"


def key_expires_at(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)


@dataclass(frozen=True)
class KeyedPop:
    """A pop's idempotency key, where it applies and until when."""

    scope: str
    key: str
    expires_at: datetime


@dataclass(frozen=True)
class Settlement:
    """A receipt to settle: all its tasks (`task_ids` None: the pop's outcome is unknown), or only
    those named (tasks handed out that did not reach their client). `popped_at`: the pop's time,
    which it wrote as its tasks' `modified_at`: the receipt's tasks are found by the index on
    (status, modified_at) the task timeout reads, so the pop maintains no index of its own."""

    receipt: uuid.UUID
    popped_at: datetime
    task_ids: tuple[uuid.UUID, ...] | None = None


def settlements_for(rows: Sequence[Mapping[str, object]]) -> list[Settlement]:
    """The settlements that hand back popped rows (each row says its receipt, time and id): one per pop."""
    by_pop: dict[tuple[uuid.UUID, datetime], list[uuid.UUID]] = {}
    for row in rows:
        receipt, popped_at, task_id = row.get("receipt"), row.get("modified_at"), row.get("id")
        if isinstance(receipt, uuid.UUID) and isinstance(popped_at, datetime) and isinstance(task_id, uuid.UUID):
            by_pop.setdefault((receipt, popped_at), []).append(task_id)
    return [Settlement(receipt, popped_at, tuple(ids)) for (receipt, popped_at), ids in by_pop.items()]
