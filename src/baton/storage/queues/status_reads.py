"""Reads for the status page and the metrics scrape that cost the same whatever the size of `tasks`:
failures of the last hour (a capped range scan), the oldest queued task of each queue (one index
probe per queue), totals per type from the counters, and the recovery count."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from baton.core.model import TaskStatus
from baton.storage.tables import QueueCounter, Scheduler, Task

FAILED_CAP = 10_000
# A bound parameter, not the literal: the planner then cannot pick the partial pop index (ordered by
# priority) and takes `ix_tasks_scheduler_status`, ordered by seq within (queue, status).
QUEUED_PARAM = Task.status == TaskStatus.QUEUED.value


def failed_since(session: Session, since: datetime, cap: int = FAILED_CAP) -> tuple[dict[str, int], bool]:
    """Failed tasks per queue whose failure is newer than `since` (a range of `ix_tasks_status_modified`),
    reading at most `cap` rows; True when the cap was reached (the counts are then lower bounds)."""
    recent = (
        select(Task.scheduler_id)
        .where(Task.status == TaskStatus.FAILED.value, Task.modified_at >= since)
        .limit(cap)
        .subquery()
    )
    counts: dict[str, int] = {}
    for scheduler_id, count in session.execute(
        select(recent.c.scheduler_id, func.count()).group_by(recent.c.scheduler_id)
    ):
        counts[scheduler_id] = int(count)
    return counts, sum(counts.values()) >= cap


def oldest_queued(session: Session, queue_ids: Sequence[str]) -> dict[str, datetime]:
    """When the longest-waiting queued task of each queue was created: the first entry of
    `ix_tasks_scheduler_status` for (queue, 'queued'), one index probe per queue."""
    if not queue_ids:
        return {}
    head = (
        select(Task.created_at)
        .where(Task.scheduler_id == Scheduler.id, QUEUED_PARAM)
        .order_by(Task.seq)
        .limit(1)
        .correlate(Scheduler)
        .scalar_subquery()
    )
    rows = session.execute(select(Scheduler.id, head).where(Scheduler.id.in_(list(queue_ids))))
    return {scheduler_id: created_at for scheduler_id, created_at in rows if created_at is not None}


def recovered_total(session: Session) -> int:
    """Times a stuck task was re-queued or failed by recovery: the sum of the tasks' attempts."""
    return int(session.scalar(select(func.coalesce(func.sum(Task.attempts), 0)).where(Task.attempts > 0)) or 0)


def type_totals(session: Session) -> dict[str, tuple[int, int, int, int]]:
    """(queues, queued, in flight, full queues) per task type, by aggregate SQL over the schedulers and
    the counters (a queue is full when its maxsize is set and reached: `core.admission.is_full`)."""
    per_queue = (
        select(
            QueueCounter.scheduler_id,
            func.sum(QueueCounter.queued).label("queued"),
            func.sum(QueueCounter.in_flight).label("in_flight"),
        )
        .group_by(QueueCounter.scheduler_id)
        .subquery()
    )
    queued = func.coalesce(per_queue.c.queued, 0)
    full = case((and_(Scheduler.maxsize > 0, queued >= Scheduler.maxsize), 1), else_=0)
    rows = session.execute(
        select(
            Scheduler.type,
            func.count(Scheduler.id),
            func.sum(queued),
            func.sum(func.coalesce(per_queue.c.in_flight, 0)),
            func.sum(full),
        )
        .select_from(Scheduler)
        .outerjoin(per_queue, per_queue.c.scheduler_id == Scheduler.id)
        .group_by(Scheduler.type)
    )
    return {
        str(kind): (int(queues), int(total or 0), int(in_flight or 0), int(full_queues or 0))
        for kind, queues, total, in_flight, full_queues in rows
    }


def oldest_queued_by_type(session: Session) -> dict[str, datetime]:
    """When the longest-waiting queued task of each type was created: one index probe per queue that
    has queued tasks (by its counters), none for an empty one, in one aggregate statement."""
    waiting = (
        select(QueueCounter.scheduler_id)
        .group_by(QueueCounter.scheduler_id)
        .having(func.sum(QueueCounter.queued) > 0)
        .subquery()
    )
    head = (
        select(Task.created_at)
        .where(Task.scheduler_id == waiting.c.scheduler_id, QUEUED_PARAM)
        .order_by(Task.seq)
        .limit(1)
        .correlate(waiting)
        .scalar_subquery()
    )
    rows = session.execute(
        select(Scheduler.type, func.min(head))
        .select_from(waiting)
        .join(Scheduler, Scheduler.id == waiting.c.scheduler_id)
        .group_by(Scheduler.type)
    )
    return {str(kind): oldest for kind, oldest in rows if oldest is not None}
