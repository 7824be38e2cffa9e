"""The boefje planner: scan-profile events (and due boefje schedules) become boefje jobs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

from baton.core.errors import UnprocessableError
from baton.core.jobs import boefje_job, job_document, job_hash
from baton.core.model import SchedulerType, utcnow
from baton.core.priorities import rank_boefje_task
from baton.ingest.catalogue import BatchCatalogue, PluginCatalogue
from baton.ingest.event_driven import EventDrivenScheduler
from baton.ingest.events import EVENT_KIND, AnyEvent, KatScanProfileMutation, ScanProfileMutation, object_scan_level
from baton.ingest.planners.scheduled import fire_due_schedules
from baton.storage import queues
from baton.storage.boefje_runs import claim_boefje_runs
from baton.storage.engine import Session
from baton.storage.queues import PushRequest
from baton.storage.tables import Plugin


class BoefjeScheduler(EventDrivenScheduler):
    """Scan-profile events (and due boefje schedules) become boefje jobs, one per enabled boefje that
    may scan the object, unless that (boefje, object) ran within the grace period."""

    type = SchedulerType.BOEFJE

    def tick(self) -> int:
        handled = super().tick()
        with self.transaction() as session:
            return handled + fire_due_schedules(self, session, self.context.clock())

    def handle_batch(self, session: Session, events: Sequence[AnyEvent]) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.context.catalogue)
        now = self.context.clock()
        organisation = self.spec.organisation
        wanted = [pair for event in events for pair in self._wanted(session, event, catalogue)]
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
        """(boefje, object) for every enabled boefje that may scan the event's object."""
        if not isinstance(event, ScanProfileMutation | KatScanProfileMutation):
            raise UnprocessableError(f"boefje scheduler cannot handle '{EVENT_KIND[type(event)]}' events")
        self.check_organisation(event)
        change = object_scan_level(event)
        if change.operation == "delete" or change.object_type is None or change.scan_level is None:
            return []
        boefjes = catalogue.boefjes_for(session, self.spec.organisation, change.object_type, change.scan_level)
        return [(boefje, change.primary_key) for boefje in boefjes]

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.grace_period_seconds)
