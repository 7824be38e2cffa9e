"""Deduplication in the database: a boefje pop that hands out the tasks sharing a `deduplication_key`
together (mula's pop_boefje), and the writes of twin tasks (ingest/planners/twins.py).

The key lives in the task's `data`; migration 0013 indexes it for queued tasks that carry one
(`ix_tasks_queued_dedup_key`), over exactly the expression `key_column` gives, so finding a group is an
index lookup however long the queue, and tasks without a key cost the index nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    bindparam,
)

from baton.core.deduplication import KEY
from baton.storage.queues.push import Executable
from baton.storage.tables import IS_QUEUED, Task

# -- twins (written by the boefje scheduler that made the original) -----------------------------------


def mark_key(executable: Executable, task_id: uuid.UUID, data: Mapping[str, Any], key: str) -> bool:
    """Give a still-queued task its key (the original of a group: its own id); False when it was handed
    out meanwhile (its runner has it without the key; its twins still pop together)."""
    statement = (
        Task.__table__.update()  # type: ignore[attr-defined]
        .where(Task.id == bindparam("id_"), IS_QUEUED)
        .values(data=bindparam("data_"))
    )
    result = executable.execute(statement, {"id_": task_id, "data_": {**data, KEY: key}})
    return bool(getattr(result, "rowcount", 0))
