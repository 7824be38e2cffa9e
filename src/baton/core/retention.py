"""Retention of finished tasks: which tasks are old enough to be removed.

A task whose status allows no further change (completed, failed, cancelled) is kept for
`BATON_TASK_RETENTION_DAYS` after its last change, then removed. What outlives its tasks: the
schedules (a task names its schedule loosely, by id) and `boefje_runs`, the record of when each
(boefje, object) was last queued that rescans and the grace period read.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from baton.core.lifecycle import ALLOWED_TRANSITIONS
from baton.core.model import TaskStatus

# Statuses nothing may follow: a task in one of them is finished for good.
FINISHED: tuple[TaskStatus, ...] = tuple(status for status, allowed in ALLOWED_TRANSITIONS.items() if not allowed)


def retention_cutoff(now: datetime, days: float) -> datetime | None:
    """Finished tasks last changed before this moment are removed; None (`days` = 0) keeps all."""
    if days <= 0:
        return None
    return now - timedelta(days=days)


def pause_after(batch_seconds: float, share: float) -> float:
    """How long to wait after a batch that took `batch_seconds`, so that removing tasks keeps a
    connection busy at most `share` of the time (pops and pushes keep the rest)."""
    if share >= 1.0:
        return 0.0
    return batch_seconds * (1.0 - share) / share
