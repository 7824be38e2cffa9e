"""New boefjes: a boefje newly enabled for an organisation gets tasks for the organisation's existing
objects it may scan (mula's process_new_boefjes), read from Octopoes one page per turn.

The catalogue sync records the backfill (storage/scheduling/backfills.py) in the transaction that records the
boefje as enabled, so a restart neither forgets it nor starts every enabled boefje over. Each turn reads
the next page at the backfill's `valid_time` (the pages agree however long it takes) and, in one fenced
transaction, makes its tasks through the one maker of boefje tasks (boefje_tasks.py: grace-period claims,
dedup by hash) and moves the cursor on: a page is done exactly once. A full queue shrinks the page (and
halves it again until it fits) rather than stall the backfill; an Octopoes outage, or a Bytes outage when
Bytes must be asked about the page's objects, leaves the cursor where it is.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from baton.core.catalogue import may_scan, scan_levels_for
from baton.core.errors import OutsideServiceError, QueueFullError
from baton.ingest.outside_links import HeldBack, OutsideLinks
from baton.ingest.planners.boefje_tasks import BoefjeTaskMaker
from baton.ingest.planners.last_runs import with_last_runs
from baton.ingest.planning import Planning
from baton.storage.scheduling.backfills import Backfill, advance_backfill, drop_backfills, next_backfill


class Backfiller:
    def __init__(self, planning: Planning, links: OutsideLinks, tasks: BoefjeTaskMaker, page_size: int = 1000) -> None:
        self.planning = planning
        self.links = links
        self.tasks = tasks
        self.page_size = page_size  # objects per Octopoes page (mula's page)
        self._shrunk_to: int | None = None  # a page size that fit a full queue; None: `page_size`
        self.pending = True  # until a look finds none; the catalogue sync sets it when it starts one
        self._retry_at: datetime | None = None

    @property
    def page(self) -> int:
        """The objects to read next: `page_size`, or less while a full queue shrank it."""
        return self.page_size if self._shrunk_to is None else min(self._shrunk_to, self.page_size)

    def step(self, now: datetime) -> int:
        """One page of the oldest backfill; how much it did (0: nothing to do, or not now)."""
        octopoes = self.links.octopoes
        if octopoes is None or not self.pending or (self._retry_at is not None and now < self._retry_at):
            return 0
        organisation = self.planning.organisation
        with self.planning.read() as session:
            backfill = next_backfill(session, organisation)
        if backfill is None:
            self.pending = False
            return 0
        try:
            page = self.links.call(
                octopoes.http,
                now,
                lambda: octopoes.objects_page(
                    organisation,
                    backfill.object_types,
                    scan_levels_for(backfill.scan_level),
                    offset=backfill.next_offset,
                    limit=self.page,
                    valid_time=backfill.valid_time,
                ),
            )
        except HeldBack:
            return 0
        except OutsideServiceError:
            self._retry_at = now + timedelta(seconds=self.links.poll_seconds)
            return 0  # logged once per outage by the client; the cursor stays
        items = [] if page is None else page.items
        reached = backfill.next_offset + len(items)
        done = page is None or not items or reached >= page.count
        objects = [(item.primary_key, item.object_type, item.scan_level) for item in items]
        try:
            made = with_last_runs(
                self.tasks.last_runs, now, lambda: self._make_tasks(backfill, objects, None if done else reached, now)
            )
        except OutsideServiceError:  # Bytes did not answer: the page is read again at its next probe
            self._retry_at = now + timedelta(seconds=self.links.poll_seconds)
            return 0
        except QueueFullError:
            self._shrunk_to = max(1, self.page // 2)
            self.planning.pause(self.planning.settings.timing.poll_interval_seconds)
            return 0
        if self._shrunk_to is not None:
            self._shrunk_to = None if self._shrunk_to * 2 >= self.page_size else self._shrunk_to * 2
        return max(made, 1)

    def _make_tasks(
        self, backfill: Backfill, objects: list[tuple[str, str, int]], next_offset: int | None, now: datetime
    ) -> int:
        organisation = self.planning.organisation
        with self.planning.transaction() as session:
            if not advance_backfill(session, backfill, next_offset):
                return 0  # begun again meanwhile: the next turn reads from its new start
            boefje = self.planning.catalogue.enabled_plugin(session, organisation, backfill.boefje_id)
            if boefje is None or boefje.type != "boefje":
                drop_backfills(session, organisation, [backfill.boefje_id])
                return 0
            wanted = [
                (boefje, key)
                for key, object_type, level in objects
                if may_scan(boefje.consumes, boefje.scan_level, object_type, level)
            ]
            return len(self.tasks.make(session, wanted, now).tasks)
