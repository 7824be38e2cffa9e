"""Pop receipts in the database (the rules: core/receipts.py): settling a receipt (and remembering to
settle it once more, when its pop may still commit), a pop that carries an idempotency key, and keys
past their time.

Every pop statement stamps the tasks it hands out with its receipt (`tasks.receipt`, in the same
UPDATE: pops.py); only what is rare lives here, on a SQLAlchemy connection in a transaction of its
own: settling (after an error answer), keyed pops (a client that chose to pay a few more statements
for retries that return the same tasks) and the housekeeping of keys and remembered receipts.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, bindparam, delete, select, update
from sqlalchemy.exc import IntegrityError

from baton.core.model import TaskStatus
from baton.core.queueing import PopTarget
from baton.core.receipts import KeyedPop, Settlement
from baton.storage.engine import insert_for, on_postgresql
from baton.storage.queues import operations as queues
from baton.storage.queues import statements
from baton.storage.queues.push import Executable, as_dict
from baton.storage.tables import IS_DISPATCHED, PendingSettlement, PopReceipt, Task

HANDED_BACK = "handed back: the pop's answer did not reach its client"
SUPERSEDED = "handed back, but an identical task is queued already"


def settle(executable: Executable, settlement: Settlement, now: datetime) -> int:
    """Put the receipt's tasks still `dispatched` back in their queue, in their place (same
    priority, same position); how many. A task whose twin (same hash) is queued meanwhile is
    cancelled instead, as recovery does. Keys that named the receipt are forgotten: a retry with
    one of them is a new pop."""
    # By (status, modified_at): the index the task timeout reads (a pop writes its time there).
    chosen = select(Task.id, Task.scheduler_id, Task.hash).where(
        IS_DISPATCHED, Task.modified_at == settlement.popped_at, Task.receipt == settlement.receipt
    )
    if settlement.task_ids is not None:
        chosen = chosen.where(Task.id.in_(settlement.task_ids))
    if on_postgresql(executable):
        chosen = chosen.with_for_update()
    requeued = 0
    taken: set[tuple[str, str]] = set()
    for task_id, queue, task_hash in executable.execute(chosen).all():
        if task_hash is not None and (
            (queue, task_hash) in taken or executable.execute(statements.twin_is_queued(queue, task_hash)).scalar()
        ):
            _set(executable, task_id, TaskStatus.CANCELLED, SUPERSEDED, now)
            continue
        try:
            with executable.begin_nested():  # a twin queued since the look above: cancelled instead
                _set(executable, task_id, TaskStatus.QUEUED, HANDED_BACK, now)
        except IntegrityError:
            _set(executable, task_id, TaskStatus.CANCELLED, SUPERSEDED, now)
            continue
        if task_hash is not None:
            taken.add((queue, task_hash))
        requeued += 1
    executable.execute(delete(PopReceipt).where(PopReceipt.receipt == settlement.receipt))
    return requeued


def settle_and_remember(executable: Executable, settlement: Settlement, now: datetime, again_at: datetime) -> int:
    """`settle` a receipt whose pop may still commit, and remember to settle it once more at `again_at`
    (any process does: `settle_remembered`). How many tasks went back now."""
    requeued = settle(executable, settlement, now)
    row = {"receipt": settlement.receipt, "popped_at": settlement.popped_at, "due_at": again_at}
    insert = insert_for(executable)(PendingSettlement).values(**row)
    executable.execute(insert.on_conflict_do_update(index_elements=[PendingSettlement.receipt], set_=row))
    return requeued


def settle_remembered(executable: Executable, now: datetime, only: uuid.UUID | None = None, limit: int = 100) -> int:
    """Settle once more the remembered receipts due by `now` (`only`: that one, whenever it is due) and
    forget them; how many tasks went back. Concurrent callers skip each other's rows."""
    due = select(PendingSettlement.receipt, PendingSettlement.popped_at)
    due = (
        due.where(PendingSettlement.receipt == only) if only is not None else due.where(PendingSettlement.due_at <= now)
    )
    if on_postgresql(executable):
        due = due.with_for_update(skip_locked=True)
    requeued = 0
    for receipt, popped_at in executable.execute(due.order_by(PendingSettlement.due_at).limit(limit)).all():
        requeued += settle(executable, Settlement(receipt, popped_at), now)
        executable.execute(delete(PendingSettlement).where(PendingSettlement.receipt == receipt))
    return requeued


def _set(executable: Executable, task_id: uuid.UUID, status: TaskStatus, reason: str, now: datetime) -> None:
    executable.execute(
        update(Task)
        .where(Task.id == task_id, IS_DISPATCHED)
        .values(status=status.value, reason=reason, receipt=None, modified_at=now)
    )


def keyed_pop(
    executable: Executable,
    target: PopTarget,
    keyed: KeyedPop,
    *,
    receipt: uuid.UUID,
    limit: int,
    now: datetime,
    condition: ColumnElement[bool] | None = None,
    caps: bool = False,
) -> list[dict[str, Any]]:
    """A pop with an idempotency key, in the caller's transaction. The key's first use within its
    time pops as usual and remembers the receipt (only if it handed something out: an empty answer
    commits nobody to anything); a later use answers the tasks still dispatched under that receipt,
    stamped with this pop's `receipt`, instead of new ones. Concurrent uses of one key wait for each
    other on the key's row."""
    where = (PopReceipt.scope == keyed.scope, PopReceipt.key == keyed.key)
    executable.execute(delete(PopReceipt).where(*where, PopReceipt.expires_at <= now))  # expired: the key is free
    remembered = (
        insert_for(executable)(PopReceipt)
        .values(scope=keyed.scope, key=keyed.key, receipt=receipt, popped_at=now, expires_at=keyed.expires_at)
        .on_conflict_do_nothing()
        .returning(PopReceipt.receipt)
    )
    if executable.execute(remembered).first() is None:
        previous = executable.execute(select(PopReceipt.receipt, PopReceipt.popped_at).where(*where)).first()
        if previous is not None:
            executable.execute(update(PopReceipt).where(*where).values(receipt=receipt, popped_at=now))
            found = {"old_": previous.receipt, "at_": previous.popped_at, "receipt_": receipt, "now_": now}
            rows = executable.execute(restamp(), found)
            return queues.sort_popped([as_dict(row) for row in rows], target)
    rows_popped = queues.pop(
        executable, target, limit=limit, now=now, condition=condition, caps=caps, raw_data=True, receipt=receipt
    )
    if not rows_popped:
        executable.execute(delete(PopReceipt).where(*where))
    return rows_popped


@cache
def restamp() -> Any:
    """The tasks still dispatched under `:old_` (popped at `:at_`), stamped with `:receipt_` (they are
    delivered again)."""
    tasks = statements.TASKS
    return (
        update(tasks)
        .where(
            IS_DISPATCHED,
            tasks.c.modified_at == bindparam("at_", type_=Task.modified_at.type),
            tasks.c.receipt == bindparam("old_", type_=Task.receipt.type),
        )
        .values(receipt=bindparam("receipt_", type_=Task.receipt.type), modified_at=bindparam("now_"))
        .returning(*statements.task_columns(raw_data=True), tasks.c.seq, tasks.c.fair_key, tasks.c.receipt)
    )


def delete_expired_keys(executable: Executable, now: datetime) -> int:
    """Forget idempotency keys past their time (housekeeping; a key's own next use does it too)."""
    result = executable.execute(delete(PopReceipt).where(PopReceipt.expires_at <= now))
    return int(getattr(result, "rowcount", 0) or 0)
