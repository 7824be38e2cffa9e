"""The catalogue a boefje scheduler keeps from KATalogus, and whether an organisation has one yet (what
its other planners wait for).

Each organisation's boefje scheduler reads the organisation's plugin listing at most once per poll
(BATON_KATALOGUS_POLL_SECONDS) and writes it into Baton's catalogue tables in its fenced transaction;
every scheduler of the organisation then plans from the database (catalogue/lookups.py
`KatalogusCatalogue`), so there is one call per organisation per poll, never one per task. A failed read
changes nothing: the last catalogue written stays, and ingest goes on with it. Until an organisation's
first listing is written its event-driven schedulers leave their events waiting (there is no catalogue
to plan with yet).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from baton.core.errors import OutsideServiceError
from baton.ingest.catalogue.katalogus_listing import listed_plugins
from baton.ingest.outside_links import HeldBack, OutsideLinks
from baton.ingest.planning import Planning
from baton.storage.scheduling.backfills import drop_backfills, start_backfills
from baton.storage.scheduling.catalogue_sync import ListingChange, apply_plugin_listing, catalogue_synced_at


class CatalogueSync:
    """One scheduler's reads of its organisation's listing: at most one per poll, the first at once
    unless the organisation's catalogue was written less than a poll ago (by this scheduler's previous
    owner, say)."""

    def __init__(self, planning: Planning, links: OutsideLinks) -> None:
        self.planning = planning
        self.links = links
        self.has_catalogue = False
        self._next_at: datetime | None = None

    @property
    def poll(self) -> timedelta:
        return timedelta(seconds=self.links.poll_seconds)

    def due(self, now: datetime) -> bool:
        if self._next_at is None:
            with self.planning.read() as session:
                last = catalogue_synced_at(session, self.planning.organisation)
            self.has_catalogue = last is not None
            self._next_at = now if last is None else min(now, last + self.poll)
        return now >= self._next_at

    def run(self, now: datetime) -> ListingChange | None:
        """Read and write the listing if a poll is due; what changed, or None (not due, or it failed).
        With Octopoes configured, newly enabled boefjes get a backfill of their existing objects."""
        if not self.due(now):
            return None
        katalogus = self.links.katalogus
        organisation = self.planning.organisation
        try:
            plugins = self.links.call(katalogus.http, now, lambda: katalogus.plugins(organisation))
        except HeldBack:
            return None  # another caller of this process probes KATalogus this poll: look again next turn
        except OutsideServiceError:
            self._next_at = now + self.poll
            return None  # logged once per outage by the client; the last catalogue stays
        self._next_at = now + self.poll
        listing = listed_plugins(plugins)
        if not self.links.listed(bool(listing)) and self.has_catalogue:
            # KATalogus always lists its own plugins: none at all is a broken KATalogus, and taking it at
            # its word would disable everything, then make every boefje "new" again when it recovers.
            return None
        with self.planning.transaction() as session:
            change = apply_plugin_listing(session, organisation, listing, now)
            if self.links.octopoes is not None:
                start_backfills(session, organisation, change.enabled, now)
            drop_backfills(session, organisation, change.disabled)
        self.has_catalogue = True
        if change.enabled or change.disabled or change.definitions:
            self.planning.log.info(
                "catalogue from KATalogus",
                enabled=[plugin.id for plugin in change.enabled],
                disabled=change.disabled,
                definitions_changed=change.definitions,
            )
        return change


class CatalogueReadiness:
    """Whether the organisation has a catalogue from KATalogus yet (once it has, it always has)."""

    def __init__(self, planning: Planning) -> None:
        self.planning = planning
        self.ready = False

    def check(self) -> bool:
        if not self.ready:
            with self.planning.read() as session:
                self.ready = catalogue_synced_at(session, self.planning.organisation) is not None
        return self.ready
