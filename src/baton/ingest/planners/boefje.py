"""The boefje planner: scan-profile events (and due boefje schedules, rescans.py) become boefje jobs, each
with its rescan schedule; with KATalogus configured it also keeps the organisation's catalogue
(ingest/katalogus.py) and gives newly enabled boefjes their existing objects (new_boefjes.py)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from baton.core.catalogue import is_rescanned, runs_on
from baton.core.errors import UnprocessableError
from baton.core.jobs import BoefjeJob, boefje_job, job_document, job_hash
from baton.core.model import SchedulerSpec, SchedulerType, utcnow
from baton.core.priorities import rank_boefje_task
from baton.ingest.catalogue import BatchCatalogue, PluginCatalogue
from baton.ingest.event_driven import EventDrivenScheduler
from baton.ingest.events import EVENT_KIND, AnyEvent, KatScanProfileMutation, ScanProfileMutation, object_scan_level
from baton.ingest.planners.catalogue_sync import CatalogueSync
from baton.ingest.planners.new_boefjes import Backfiller
from baton.ingest.planners.rescans import Rescanner, schedule_for
from baton.ingest.planners.twins import twin_planner
from baton.ingest.scheduler import SchedulerContext
from baton.storage import queues
from baton.storage.boefje_runs import RunClaim, claim_boefje_runs
from baton.storage.engine import Session
from baton.storage.queues import PushRequest
from baton.storage.rescans import keep_schedules, reenable_schedules
from baton.storage.scheduler_leases import Claim
from baton.storage.tables import Plugin


class BoefjeScheduler(EventDrivenScheduler):
    """Scan-profile events (and due boefje schedules) become boefje jobs, one per enabled boefje that
    may scan the object (and runs on the event's operation), unless that (boefje, object) ran within the
    grace period."""

    type = SchedulerType.BOEFJE
    backfill_page_size: ClassVar[int] = 1000  # objects per Octopoes page for a new boefje (mula's page)

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        super().__init__(spec, context, claim)
        link = context.katalogus
        self.catalogue_sync = None if link is None else CatalogueSync(self, link)
        self.backfiller = (
            None if link is None else Backfiller(self, link, self.push_boefje_tasks, lambda: self.backfill_page_size)
        )
        self.rescanner = Rescanner(self, link, self.plan_boefje_tasks)
        self.twins = twin_planner(self, link)  # deduplication: other organisations' twins of its tasks
        self._planned = 0  # what the last tick's planners did

    def tick(self) -> int:
        done = 0
        self._planned = 0
        if self.catalogue_sync is not None and self.backfiller is not None:
            now = self.context.clock()
            change = self.catalogue_sync.run(now, octopoes=self.backfiller.link.octopoes is not None)
            if change is not None and change.enabled:
                self.backfiller.pending = True
            if not self.catalogue_sync.has_catalogue:
                return 0  # no catalogue yet to plan with: events wait
            done += self.backfiller.step(now)
        events = super().tick()
        if self.twins is not None:
            done += self.twins.step(self.context.clock())
        done += self.rescanner.step(self.context.clock())
        self._planned = done
        return done + events

    def caught_up(self) -> bool:
        """Its events drained, and its planners (backfill, twins, rescans) found nothing to do: they
        may have more waiting than one turn takes."""
        return self._planned == 0 and super().caught_up()

    def handle_batch(self, session: Session, events: Sequence[AnyEvent]) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.context.catalogue)
        wanted = [pair for event in events for pair in self._wanted(session, event, catalogue)]
        return self.push_boefje_tasks(session, wanted, self.context.clock())

    def push_boefje_tasks(
        self, session: Session, wanted: Sequence[tuple[Plugin, str]], now: datetime
    ) -> list[dict[str, object]]:
        """A task for each (boefje, object) whose grace-period claim this call wins, ranked by its last run;
        each gets (or refreshes) its rescan schedule."""
        return self.plan_boefje_tasks(session, wanted, now).tasks

    def plan_boefje_tasks(
        self,
        session: Session,
        wanted: Sequence[tuple[Plugin, str]],
        now: datetime,
        *,
        grace: timedelta | None = None,
        schedules: Mapping[tuple[str, str], uuid.UUID] | None = None,
    ) -> BoefjePlan:
        """`push_boefje_tasks`, with the claims. `schedules`: the schedules the tasks belong to, by (boefje,
        object), which the caller writes itself (the rescans); without them each queued pair's schedule is
        created or refreshed, and one disabled for a reason enabled again (a pair that ran within the grace
        period too: it is fit to scan)."""
        organisation = self.spec.organisation
        pairs = [(boefje.id, key) for boefje, key in wanted]
        claims = claim_boefje_runs(session, organisation, pairs, now, self.grace if grace is None else grace)
        jobs: list[tuple[Plugin, str, BoefjeJob, str]] = []
        fit_not_queued: list[str] = []
        for (boefje, object_key), claim in zip(wanted, claims, strict=True):
            job = boefje_job(
                uuid.uuid4(), boefje.id, boefje.name, boefje.version, boefje.oci_image, object_key, organisation
            )
            digest = job_hash(job)
            if claim.claimed:
                jobs.append((boefje, object_key, job, digest))
            else:
                fit_not_queued.append(digest)
        if schedules is None:
            kept = [
                schedule_for(self.settings, organisation, boefje, digest, job_document(job), now)
                for boefje, _, job, digest in jobs
                if is_rescanned(boefje.run_on)
            ]
            by_hash = keep_schedules(session, kept, now)
            reenable_schedules(session, organisation, fit_not_queued, now)
            schedules = {(boefje.id, key): by_hash[digest] for boefje, key, _, digest in jobs if digest in by_hash}
        requests: list[PushRequest] = []
        previous = {pair: claim.previous_run for pair, claim in zip(pairs, claims, strict=True)}
        for boefje, object_key, job, digest in jobs:
            schedule_id = schedules.get((boefje.id, object_key))
            requests.append(
                PushRequest(
                    queue=self.id,
                    priority=rank_boefje_task(previous[(boefje.id, object_key)], now),
                    data=job_document(job),
                    hash=digest,
                    schedule_id=None if schedule_id is None else str(schedule_id),
                    task_id=job.id,
                )
            )
        results = queues.push_many(session, requests, utcnow())
        if self.twins is not None:
            levels = {boefje.id: boefje.scan_level for boefje, _ in wanted}
            self.twins.note([result.task for result in results if result.created], levels)
        return BoefjePlan([result.task for result in results], claims)

    def _wanted(self, session: Session, event: AnyEvent, catalogue: PluginCatalogue) -> list[tuple[Plugin, str]]:
        """(boefje, object) for every enabled boefje that may scan the event's object on its operation."""
        if not isinstance(event, ScanProfileMutation | KatScanProfileMutation):
            raise UnprocessableError(f"boefje scheduler cannot handle '{EVENT_KIND[type(event)]}' events")
        self.check_organisation(event)
        change = object_scan_level(event)
        if change.operation == "delete" or change.object_type is None or change.scan_level is None:
            return []
        boefjes = catalogue.boefjes_for(session, self.spec.organisation, change.object_type, change.scan_level)
        return [(boefje, change.primary_key) for boefje in boefjes if runs_on(boefje.run_on, change.operation)]

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.grace_period_seconds)


@dataclass(frozen=True)
class BoefjePlan:
    tasks: list[dict[str, object]]  # the tasks queued (or the queued twins they updated)
    claims: list[RunClaim]  # one per (boefje, object) asked for, in order: claimed means queued now
