"""Which pops hand out a deduplication group together (mula's pop_boefje), and which stay the plain pop.

A boefje pop asking for more than one task, with BATON_DEDUPLICATE on, is `pop_together`: one statement
that dispatches the head task and, when it carries a `deduplication_key`, the queued tasks of any
organisation sharing it, else the next tasks as any pop (storage/deduplication.py). On PostgreSQL it is
sent on the fast path's pool like the pop, but not grouped with other pops (each has its own head).
Every other pop, and so every pop of one task (OpenKAT's runners ask for one), is the plain pop
statement untouched, with nothing added but this test.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from baton.core.deduplication import pops_together, target_type
from baton.core.filters import FilterTree
from baton.core.queueing import PopTarget
from baton.storage.executors import QueueExecutor


class DeduplicatedPop:
    def __init__(self, executor: QueueExecutor, enabled: bool) -> None:
        self.executor = executor
        self.enabled = enabled

    async def pop(
        self, target: PopTarget, *, limit: int, now: datetime, tree: FilterTree | None, caps: bool
    ) -> list[dict[str, Any]]:
        if pops_together(target_type(target.queue, target.type), limit, self.enabled):
            return await self.executor.pop_together(target, limit=limit, now=now, tree=tree, caps=caps)
        return await self.executor.pop(target, limit=limit, now=now, tree=tree, caps=caps)
