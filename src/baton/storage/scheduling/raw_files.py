"""Raw files that normalizer tasks exist for: a redelivered raw-file event plans no second task."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from baton.core.model import TaskStatus
from baton.storage.engine import on_postgresql
from baton.storage.tables import Task


def handled_raw_files(session: Session, scheduler_id: str, digests: set[str]) -> set[tuple[str | None, str]]:
    """(hash, raw file id) of the tasks with one of these hashes that are not failed or cancelled:
    a normalizer (in the hash) has a live task for that raw file."""
    if not digests:
        return set()
    if on_postgresql(session):
        rows = session.execute(LIVE_RAW_FILES, {"scheduler_id": scheduler_id, "digests": sorted(digests)})
    else:
        rows = session.execute(
            select(Task.hash, Task.data[("raw_data", "id")].as_string()).where(
                Task.scheduler_id == scheduler_id,
                Task.hash.in_(digests),
                Task.status.not_in([TaskStatus.FAILED.value, TaskStatus.CANCELLED.value]),
            )
        )
    return {(digest, found) for digest, found in rows if found is not None}


# One index probe per hash, whatever the statistics say: `hash = ANY(...)` may be planned as a scan
# of all the queue's tasks when the planner believes the queue is small (a new one, stale stats).
# OFFSET 0 keeps the lateral subquery from being flattened into a join that could be planned so.
LIVE_RAW_FILES = text("""
SELECT d.hash, t.raw_id
FROM unnest(CAST(:digests AS text[])) AS d(hash)
CROSS JOIN LATERAL (
  SELECT data #>> '{raw_data,id}' AS raw_id FROM tasks
  WHERE scheduler_id = :scheduler_id AND hash = d.hash AND status NOT IN ('failed', 'cancelled')
  OFFSET 0
) t
""")
