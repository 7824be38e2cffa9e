"""The report planner: due report schedules become OpenKAT report jobs."""

from __future__ import annotations

from baton.core.model import SchedulerType
from baton.ingest.planners.scheduled import fire_due_schedules
from baton.ingest.scheduler import Scheduler


class ReportScheduler(Scheduler):
    """Due report schedules become OpenKAT report jobs."""

    type = SchedulerType.REPORT

    def tick(self) -> int:
        now = self.planning.clock()
        with self.planning.transaction() as session:
            return fire_due_schedules(self.planning, self.type, session, now, self.batch_size)
