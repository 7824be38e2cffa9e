"""Which pops hand out a deduplication group together (mula's pop_boefje), and which stay the plain pop.

A boefje pop asking for more than one task, with BATON_DEDUPLICATE on, is `pop_together`: one statement
that dispatches the head task and, when it carries a `deduplication_key`, the queued tasks of any
organisation sharing it, else the next tasks as any pop (storage/deduplication.py). On PostgreSQL it is
sent on the fast path's pool like the pop, but not grouped with other pops (each has its own head).
Every other pop, and so every pop of one task (OpenKAT's runners ask for one), is the plain pop
statement untouched, with nothing added but this test; so is a pop with an idempotency key (its own
path, storage/receipts.py). Both stamp the pop's receipt on what they hand out.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from baton.core.deduplication import pops_together, target_type
from baton.core.filters import FilterTree
from baton.core.queueing import PopTarget
from baton.core.receipts import KeyedPop
from baton.storage.executors import QueueExecutor


async def deduplicated_pop(
    executor: QueueExecutor,
    target: PopTarget,
    *,
    enabled: bool,
    limit: int,
    now: datetime,
    tree: FilterTree | None,
    caps: bool,
    receipt: uuid.UUID,
    keyed: KeyedPop | None,
) -> list[dict[str, Any]]:
    """The pop, through `executor`: a deduplication group together where one applies (`enabled`: the
    BATON_DEDUPLICATE setting), else the plain (or keyed) pop."""
    if keyed is None and pops_together(target_type(target.queue, target.type), limit, enabled):
        return await executor.pop_together(target, limit=limit, now=now, tree=tree, caps=caps, receipt=receipt)
    return await executor.pop(target, limit=limit, now=now, tree=tree, caps=caps, receipt=receipt, keyed=keyed)
