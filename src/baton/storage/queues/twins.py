"""The writes of twin tasks (ingest/planners/twins.py): the original of a deduplication group given its
key, so the group pops together (the pop itself: pops.py)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam

from baton.core.deduplication import KEY
from baton.storage.queues.push import Executable
from baton.storage.tables import IS_QUEUED, Task


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
