"""The catalogue a boefje scheduler keeps from KATalogus (at most one read of the organisation's
listing per poll, written in the scheduler's fenced transaction), and whether an organisation has
one yet (what the other planners wait for). The link to KATalogus itself: ingest/katalogus.py."""

from __future__ import annotations

from datetime import datetime, timedelta

from baton.core.errors import OutsideServiceError
from baton.ingest.katalogus import KatalogusLink, listed_plugins
from baton.ingest.scheduler import Scheduler
from baton.storage.backfills import drop_backfills, start_backfills
from baton.storage.catalogue_sync import ListingChange, apply_plugin_listing, catalogue_synced_at


class CatalogueSync:
    """One scheduler's reads of its organisation's listing: at most one per poll, the first at once
    unless the organisation's catalogue was written less than a poll ago (by this scheduler's previous
    owner, say)."""

    def __init__(self, scheduler: Scheduler, link: KatalogusLink) -> None:
        self.scheduler = scheduler
        self.link = link
        self.organisation = scheduler.spec.organisation
        self.has_catalogue = False
        self._next_at: datetime | None = None

    @property
    def poll(self) -> timedelta:
        return timedelta(seconds=self.link.poll_seconds)

    def due(self, now: datetime) -> bool:
        if self._next_at is None:
            with self.scheduler.store.session() as session:
                last = catalogue_synced_at(session, self.organisation)
            self.has_catalogue = last is not None
            self._next_at = now if last is None else min(now, last + self.poll)
        return now >= self._next_at

    def run(self, now: datetime, *, octopoes: bool) -> ListingChange | None:
        """Read and write the listing if a poll is due; what changed, or None (not due, or it failed).
        `octopoes`: newly enabled boefjes get a backfill of their existing objects."""
        if not self.due(now):
            return None
        katalogus = self.link.katalogus
        if not self.link.may_call(katalogus.http, now):
            return None
        self._next_at = now + self.poll
        try:
            plugins = katalogus.plugins(self.organisation)
        except OutsideServiceError:
            self.link.failed(katalogus.http, now)
            return None  # logged once per outage by the client; the last catalogue stays
        finally:
            self.link.observed(katalogus.http)
        listing = listed_plugins(plugins)
        if not self.link.listed(bool(listing)) and self.has_catalogue:
            # KATalogus always lists its own plugins: none at all is a broken KATalogus, and taking it at
            # its word would disable everything, then make every boefje "new" again when it recovers.
            return None
        with self.scheduler.transaction() as session:
            change = apply_plugin_listing(session, self.organisation, listing, now)
            if octopoes:
                start_backfills(session, self.organisation, change.enabled, now)
            drop_backfills(session, self.organisation, change.disabled)
        self.has_catalogue = True
        if change.enabled or change.disabled or change.definitions:
            self.scheduler.log.info(
                "catalogue from KATalogus",
                enabled=[plugin.id for plugin in change.enabled],
                disabled=change.disabled,
                definitions_changed=change.definitions,
            )
        return change


class CatalogueReadiness:
    """Whether the organisation has a catalogue from KATalogus yet (once it has, it always has)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.ready = False

    def check(self) -> bool:
        if not self.ready:
            with self.scheduler.store.session() as session:
                self.ready = catalogue_synced_at(session, self.scheduler.spec.organisation) is not None
        return self.ready
