"""Due report schedules become tasks: the report scheduler fires them every tick (boefje schedules are
rescan_rounds.py's: checked before they become tasks)."""

from __future__ import annotations

import uuid
from datetime import datetime

from baton.core.cron import next_deadline
from baton.core.jobs import JOB_MODELS, Job, ReportJob, carries_its_task_id, job_document, job_hash
from baton.core.model import SchedulerType
from baton.core.priorities import AUTOMATIC_PRIORITY
from baton.ingest.planning import Planning
from baton.storage.engine import Session
from baton.storage.queues import operations as queues
from baton.storage.queues.operations import PushRequest
from baton.storage.scheduling.schedules import claim_due
from baton.storage.tables import Schedule as ScheduleRow


def fire_due_schedules(planning: Planning, kind: SchedulerType, session: Session, now: datetime, limit: int) -> int:
    """Turn up to `limit` due schedules of `kind` for the planning's organisation into tasks; the tasks made.
    A cron schedule's next deadline is counted from `now`, not from the missed slot: however many runs were
    missed, one task catches up. A schedule whose task is still queued keeps its deadline (mula's rule: the
    same task may not be pushed while it waits): it fires once that task has left the queue, instead of
    skipping the run until the next slot."""
    due = claim_due(session, kind.value, planning.organisation, now, limit, queue=planning.queue)
    made = 0
    for schedule in due:
        task_id = uuid.uuid4()
        job = scheduled_job(kind, schedule, task_id)
        request = PushRequest(
            queue=planning.queue,
            priority=AUTOMATIC_PRIORITY,
            data=job_document(job),
            hash=job_hash(job),
            schedule_id=str(schedule.id),
            task_id=task_id,
        )
        if not queues.push(session, request, now).created:
            continue  # its task is queued still (a schedule without a hash is found so): tried again later
        schedule.last_run_at = now
        schedule.deadline_at = next_deadline(schedule.schedule, now)
        made += 1
    return made


def scheduled_job(kind: SchedulerType, schedule: ScheduleRow, task_id: uuid.UUID) -> Job:
    data = dict(schedule.data)
    if kind is SchedulerType.REPORT:
        data.setdefault("report_recipe_id", str(schedule.id))
        data["organisation_id"] = schedule.organisation
        return ReportJob.model_validate(data)
    model = JOB_MODELS[kind]
    job = model.model_validate(data)
    if carries_its_task_id(kind):
        job.id = task_id  # type: ignore[attr-defined]
    return job
