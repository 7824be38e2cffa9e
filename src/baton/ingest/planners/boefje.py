"""The boefje planner: scan-profile events (and due boefje schedules) become boefje jobs; with KATalogus
configured it also keeps the organisation's catalogue (ingest/katalogus.py) and gives newly enabled
boefjes their existing objects (new_boefjes.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import ClassVar

from baton.core.catalogue import runs_on
from baton.core.errors import UnprocessableError
from baton.core.jobs import boefje_job, job_document, job_hash
from baton.core.model import SchedulerSpec, SchedulerType, utcnow
from baton.core.priorities import rank_boefje_task
from baton.ingest.catalogue import BatchCatalogue, PluginCatalogue
from baton.ingest.event_driven import EventDrivenScheduler
from baton.ingest.events import EVENT_KIND, AnyEvent, KatScanProfileMutation, ScanProfileMutation, object_scan_level
from baton.ingest.planners.catalogue_sync import CatalogueSync
from baton.ingest.planners.new_boefjes import Backfiller
from baton.ingest.planners.scheduled import fire_due_schedules
from baton.ingest.scheduler import SchedulerContext
from baton.storage import queues
from baton.storage.boefje_runs import claim_boefje_runs
from baton.storage.engine import Session
from baton.storage.queues import PushRequest
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

    def tick(self) -> int:
        done = 0
        if self.catalogue_sync is not None and self.backfiller is not None:
            now = self.context.clock()
            change = self.catalogue_sync.run(now, octopoes=self.backfiller.link.octopoes is not None)
            if change is not None and change.enabled:
                self.backfiller.pending = True
            if not self.catalogue_sync.has_catalogue:
                return 0  # no catalogue yet to plan with: events wait
            done += self.backfiller.step(now)
        done += super().tick()
        with self.transaction() as session:
            return done + fire_due_schedules(self, session, self.context.clock())

    def handle_batch(self, session: Session, events: Sequence[AnyEvent]) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.context.catalogue)
        wanted = [pair for event in events for pair in self._wanted(session, event, catalogue)]
        return self.push_boefje_tasks(session, wanted, self.context.clock())

    def push_boefje_tasks(
        self, session: Session, wanted: Sequence[tuple[Plugin, str]], now: datetime
    ) -> list[dict[str, object]]:
        """A task for each (boefje, object) whose grace-period claim this call wins, ranked by its last run."""
        organisation = self.spec.organisation
        claims = claim_boefje_runs(session, organisation, [(boefje.id, key) for boefje, key in wanted], now, self.grace)
        requests: list[PushRequest] = []
        for (boefje, object_key), claim in zip(wanted, claims, strict=True):
            if not claim.claimed:
                continue
            task_id = uuid.uuid4()
            job = boefje_job(
                task_id, boefje.id, boefje.name, boefje.version, boefje.oci_image, object_key, organisation
            )
            requests.append(
                PushRequest(
                    queue=self.id,
                    priority=rank_boefje_task(claim.previous_run, now),
                    data=job_document(job),
                    hash=job_hash(job),
                    task_id=task_id,
                )
            )
        return [result.task for result in queues.push_many(session, requests, utcnow())]

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
