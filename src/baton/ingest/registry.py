"""Which class runs each type of scheduler, and building one."""

from __future__ import annotations

from baton.core.model import SchedulerSpec, SchedulerType
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.ingest.planners.report import ReportScheduler
from baton.ingest.scheduler import Scheduler, SchedulerContext
from baton.storage.control.scheduler_leases import Claim

SCHEDULER_CLASSES: dict[SchedulerType, type[Scheduler]] = {
    SchedulerType.BOEFJE: BoefjeScheduler,
    SchedulerType.NORMALIZER: NormalizerScheduler,
    SchedulerType.REPORT: ReportScheduler,
}


def build_scheduler(spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> Scheduler:
    return SCHEDULER_CLASSES[spec.type](spec, context, claim)
