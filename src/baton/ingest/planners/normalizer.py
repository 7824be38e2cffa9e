"""The normalizer planner: raw-file events become normalizer jobs, one per enabled normalizer that reads
one of the file's mime types. Two mime types say otherwise: an `error/...` one (the boefje failed: nothing
to normalise) and `openkat/deschedule`, with which a boefje asks not to be run on that object again (a TLS
scan of a port that speaks no TLS, say): the boefje's schedule for the object is deleted, and the file
gets no normalizer task (OpenKAT's normalizer scheduler after v1.20.1)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from baton.core.errors import UnprocessableError
from baton.core.jobs import BoefjeJob, Normalizer, NormalizerJob, RawData, job_document, job_hash
from baton.core.model import SchedulerSpec, SchedulerType
from baton.core.priorities import AUTOMATIC_PRIORITY
from baton.ingest.catalogue.lookups import BatchCatalogue, PluginCatalogue
from baton.ingest.event_driven import EventDrivenScheduler
from baton.ingest.events import EVENT_KIND, AnyEvent, KatRawDataReceived, RawFileReceived, raw_data_of
from baton.ingest.planners.catalogue_sync import CatalogueReadiness
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.scheduler_leases import Claim
from baton.storage.engine import Session
from baton.storage.queues import operations as queues
from baton.storage.queues.operations import PushRequest
from baton.storage.scheduling.boefje_schedules import delete_boefje_schedule
from baton.storage.scheduling.raw_files import handled_raw_files

DESCHEDULE = "openkat/deschedule"  # a boefje's word that it is not to be scheduled on this object again


class NormalizerScheduler(EventDrivenScheduler):
    """Raw-file events become normalizer jobs, one per enabled normalizer that reads one of the file's
    mime types; the job carries the whole raw file with the boefje job that produced it."""

    type = SchedulerType.NORMALIZER

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        super().__init__(spec, context, claim)
        # With KATalogus as the catalogue, its events wait until the boefje scheduler wrote a first one.
        self.catalogue_ready = None if context.links is None else CatalogueReadiness(self.planning)

    def tick(self) -> int:
        if self.catalogue_ready is not None and not self.catalogue_ready.check():
            return 0
        return super().tick()

    def handle_batch(self, session: Session, events: Sequence[AnyEvent], now: datetime) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.planning.catalogue)
        planned = [job for event in events for job in self._plan(session, event, catalogue, now)]
        requests = self._not_handled_yet(session, planned)
        return [result.task for result in queues.push_many(session, requests, now)]

    def _plan(self, session: Session, event: AnyEvent, catalogue: PluginCatalogue, now: datetime) -> list[PlannedJob]:
        if not isinstance(event, RawFileReceived | KatRawDataReceived):
            raise UnprocessableError(f"normalizer scheduler cannot handle '{EVENT_KIND[type(event)]}' events")
        self.check_organisation(event)
        raw = raw_data_of(event, self.spec.organisation, now)
        mime_types = [mime["value"] for mime in raw.mime_types if mime.get("value")]
        if DESCHEDULE in mime_types:
            self._deschedule(session, raw)
            return []
        if any(mime.startswith("error/") for mime in mime_types):
            return []  # the boefje failed: nothing to normalise (as OpenKAT does)
        planned: list[PlannedJob] = []
        for plugin in catalogue.normalizers_for(session, self.spec.organisation, mime_types):
            task_id = uuid.uuid4()
            job = NormalizerJob(
                id=task_id,
                normalizer=Normalizer(id=plugin.id, name=plugin.name, version=plugin.version),
                raw_data=raw,
            )
            digest = job_hash(job)
            request = PushRequest(
                queue=self.id, priority=AUTOMATIC_PRIORITY, data=job_document(job), hash=digest, task_id=task_id
            )
            planned.append(PlannedJob(request, str(raw.id)))
        return planned

    def _deschedule(self, session: Session, raw: RawData) -> None:
        """Delete the schedule of the boefje that made `raw`, for its object: the one whose job's hash is
        that of the boefje job the file names (organisation, boefje, object)."""
        meta = raw.boefje_meta
        job = BoefjeJob(boefje=meta.boefje, input_ooi=meta.input_ooi, organization=meta.organization)
        if delete_boefje_schedule(session, self.spec.organisation, job_hash(job)):
            self.log.info("boefje schedule removed at its request", boefje=meta.boefje.id, object=meta.input_ooi)

    def _not_handled_yet(self, session: Session, planned: Sequence[PlannedJob]) -> list[PushRequest]:
        """Leave out a job whose task exists (a redelivered event), or that an earlier event of the
        batch asked for already (its task exists by the time this one's turn comes)."""
        done = handled_raw_files(session, self.id, {job.request.hash for job in planned if job.request.hash})
        requests: list[PushRequest] = []
        for job in planned:
            key = (job.request.hash, job.raw_id)
            if key not in done:
                done.add(key)
                requests.append(job.request)
        return requests


@dataclass(frozen=True)
class PlannedJob:
    request: PushRequest
    raw_id: str
