"""The boefje scheduler: scan-profile events become boefje tasks, through the one maker of boefje tasks
(boefje_tasks.py) that its other planners share: due boefje schedules (rescan_rounds.py), twins in other
organisations (twins.py) and, with KATalogus configured, the organisation's catalogue (catalogue_sync.py)
and newly enabled boefjes' existing objects (new_boefjes.py); with Bytes configured too, the maker asks it
about the runs Baton did not see (last_runs.py). Each turn reads the clock once and hands the same `now`
to each of them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from baton.core.catalogue import runs_on
from baton.core.errors import OutsideServiceError, UnprocessableError
from baton.core.model import SchedulerSpec, SchedulerType
from baton.ingest.catalogue.lookups import BatchCatalogue, PluginCatalogue
from baton.ingest.event_driven import EventDrivenScheduler
from baton.ingest.events import EVENT_KIND, AnyEvent, KatScanProfileMutation, ScanProfileMutation, object_scan_level
from baton.ingest.planners.boefje_tasks import BoefjeTaskMaker
from baton.ingest.planners.catalogue_sync import CatalogueSync
from baton.ingest.planners.last_runs import LastRuns, with_last_runs
from baton.ingest.planners.new_boefjes import Backfiller
from baton.ingest.planners.rescan_rounds import RescanRounds
from baton.ingest.planners.twins import TwinPlanner, deduplicates
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.scheduler_leases import Claim
from baton.storage.engine import Session
from baton.storage.queues.twin_checks import has_twin_checks
from baton.storage.scheduling.backfills import next_backfill
from baton.storage.tables import Plugin


class BoefjeScheduler(EventDrivenScheduler):
    """Scan-profile events (and due boefje schedules) become boefje jobs, one per enabled boefje that
    may scan the object (and runs on the event's operation), unless that (boefje, object) ran within the
    grace period."""

    type = SchedulerType.BOEFJE

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        super().__init__(spec, context, claim)
        planning = self.planning
        links = planning.links
        twins = deduplicates(planning)
        # With Bytes configured: what it says of the runs Baton did not see, before the grace period is granted.
        self.last_runs: LastRuns | None = None
        if links is not None and links.bytes is not None:
            self.last_runs = LastRuns(links, planning.settings.recovery.task_timeout_seconds)
        self.tasks = BoefjeTaskMaker(planning, twins=twins, last_runs=self.last_runs)
        self.catalogue_sync = None if links is None else CatalogueSync(planning, links)
        self.backfiller = None if links is None else Backfiller(planning, links, self.tasks)
        self.rescans = RescanRounds(planning, self.tasks)
        # Deduplication: other organisations' twins of its tasks.
        self.twins = TwinPlanner(planning, links, self.tasks) if links is not None and twins else None
        self._planned = 0  # what the last tick's planners did

    def tick(self) -> int:
        now = self.planning.clock()
        done = 0
        self._planned = 0
        if self.catalogue_sync is not None and self.backfiller is not None:
            change = self.catalogue_sync.run(now)
            if change is not None and change.enabled:
                self.backfiller.pending = True
            if not self.catalogue_sync.has_catalogue:
                return 0  # no catalogue yet to plan with: events wait
            done += self.backfiller.step(now)
        events = self._handle_events_asking_bytes(now)
        if self.twins is not None:
            done += self.twins.step(now)
        done += self.rescans.step(now)
        self._planned = done
        return done + events

    def _handle_events_asking_bytes(self, now: datetime) -> int:
        """A batch of events; when Bytes must be asked first and does not answer, the events wait (their
        transaction rolled back, the deliveries given back) for a turn after the next probe of Bytes."""
        try:
            return with_last_runs(self.last_runs, now, lambda: self.handle_events(now))
        except OutsideServiceError:  # logged once per outage by Bytes' client
            return 0

    def left_over_work(self) -> bool:
        """Twin checks and backfills a previous owner left unfinished (killed in the middle, say): no
        event or schedule announces them, so without a first turn they would wait for the organisation's
        next event."""
        if self.twins is None and self.backfiller is None:
            return False
        organisation = self.spec.organisation
        with self.planning.read() as session:
            if self.twins is not None and has_twin_checks(session, organisation):
                return True
            return self.backfiller is not None and next_backfill(session, organisation) is not None

    def caught_up(self) -> bool:
        """Its events drained, and its planners (backfill, twins, rescans) found nothing to do: they
        may have more waiting than one turn takes."""
        return self._planned == 0 and super().caught_up()

    def handle_batch(self, session: Session, events: Sequence[AnyEvent], now: datetime) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.planning.catalogue)
        wanted = [pair for event in events for pair in self._wanted(session, event, catalogue)]
        return self.tasks.make(session, wanted, now).tasks

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
