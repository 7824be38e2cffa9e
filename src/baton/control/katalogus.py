"""Organisations from KATalogus (when BATON_KATALOGUS_URL is set): every poll, `GET /v1/organisations`;
an organisation KATalogus lists gets its Baton organisation (and so its schedulers, started by the
director or the workers), and one that KATalogus created here and no longer lists is removed.

Every process that watches organisations (directors, workers: where the RabbitMQ watcher runs too) runs
this service, but only the holder of the `katalogus` leadership lease polls, and it writes only while the
lease is still its own, checked and locked in the transaction that writes (storage/leadership.py
`leads_now`). So two listings never race: a stale one (read before a removal, written after it) can only
come from a holder that lost the lease meanwhile, and its write is refused. What a listing cannot undo is
a change made in Baton itself: an organisation deleted through the API while KATalogus still lists it
comes back at the next poll, as KATalogus is where organisations are made.

Removal is guarded: a failed listing changes nothing (the client logs the outage once), and a listing
without any organisation removes nothing (core/catalogue.py `organisations_to_remove`). Organisations
made in Baton (the API, a RabbitMQ organisation message) are never removed by the sync; one made because
a message or a push named it (`source` "auto") becomes KATalogus' once KATalogus lists it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from baton.control.leadership import DatabaseLeaseLeader, LeaderElector
from baton.core.catalogue import KATALOGUS_SOURCE, organisations_to_remove
from baton.core.errors import DatabaseUnavailableError, OutsideServiceError
from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService
from baton.ingest.outside_services import OutsideServiceRecorder
from baton.openkat import KatalogusClient
from baton.storage.engine import Store
from baton.storage.leadership import leads_now
from baton.storage.organisation_sync import add_katalogus_organisation, adopt_auto_organisations, organisation_ids
from baton.storage.organisations import delete_organisation

log = get_logger("baton.katalogus")
KATALOGUS_ROLE = "katalogus"
KATALOGUS_LOCK_KEY = 0x0BA7_0003  # its leader's liveness lock (the director's is 0x0BA7_0002)


@dataclass
class OrganisationSyncRound:
    added: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    listed: int = 0


class KatalogusOrganisationSync(BackgroundService):
    thread_name = "katalogus-organisations"

    def __init__(
        self,
        store: Store,
        settings: Settings,
        katalogus: KatalogusClient,
        recorder: OutsideServiceRecorder | None = None,
        leader: LeaderElector | None = None,
        clock: Callable[[], float] = time.monotonic,
        holder: str | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.settings = settings
        self.katalogus = katalogus
        self.recorder = recorder
        self.holder = holder or process_location()
        self.leader = leader or DatabaseLeaseLeader(
            store, self.holder, settings.leases, role=KATALOGUS_ROLE, liveness_key=KATALOGUS_LOCK_KEY
        )
        self.poll_seconds = settings.openkat.katalogus_poll_seconds
        self._clock = clock
        self._next_poll = 0.0
        self._said_empty = False

    def step(self) -> OrganisationSyncRound | None:
        """Keep (or take) the lease; poll if this process holds it and a poll is due. The round's changes,
        or None when it did not poll or the poll failed."""
        if not self.leader.acquire_or_renew():
            self._next_poll = 0.0  # leading again later: poll at once
            return None
        if self._clock() < self._next_poll:
            return None
        self._next_poll = self._clock() + self.poll_seconds
        try:
            listing = self.katalogus.organisations()
        except OutsideServiceError:
            return None  # logged once per outage by the client; nothing changes
        finally:
            if self.recorder is not None:
                self.recorder.note(self.katalogus.http)
        return self.apply({org_id: org.name or org_id for org_id, org in listing.items()})

    def apply(self, listing: dict[str, str]) -> OrganisationSyncRound | None:
        """Make Baton's organisations what `listing` (id -> name) says, while the lease is ours."""
        round_ = OrganisationSyncRound(listed=len(listing))
        with self.store.session() as session:
            term = self.leader.term
            if term is not None and not leads_now(session, KATALOGUS_ROLE, self.holder, term):
                log.info("KATalogus listing not applied: the lease was lost meanwhile", term=term)
                return None
            existing = organisation_ids(session)
            for org_id in sorted(listing.keys() - existing):
                if add_katalogus_organisation(session, org_id, listing[org_id], self.settings.queue_maxsize):
                    round_.added.append(org_id)
            round_.adopted = adopt_auto_organisations(session, listing.keys())
            ours = organisation_ids(session, KATALOGUS_SOURCE)
            for org_id in sorted(organisations_to_remove(listing.keys(), ours)):
                delete_organisation(session, org_id)
                round_.removed.append(org_id)
        if round_.added or round_.adopted or round_.removed:
            log.info("organisations from KATalogus", added=round_.added, adopted=round_.adopted, removed=round_.removed)
        if not listing and not self._said_empty:
            log.warning("KATalogus lists no organisation; removing none", kept=len(ours))
        self._said_empty = not listing
        return round_

    def run(self) -> None:
        log.info("reading organisations from KATalogus", url=self.katalogus.http.base_url, every=self.poll_seconds)
        # Rounds at the lease's retry period keep the lease; the listing is read once per poll.
        period = min(self.poll_seconds, self.settings.leases.retry_period_seconds)
        while not self.stopping:
            try:
                self.step()
            except DatabaseUnavailableError:
                pass  # the process's outage tracker logs it once, and its end; the next round retries
            except Exception as exc:  # a bug, say: the next round tries again
                error = (str(exc) or repr(exc)).splitlines()[0]
                log.warning("KATalogus organisation round failed; retrying", error=error)
            self._stop.wait(period)

    def stopped(self, timeout: float) -> None:
        self.leader.release()


def katalogus_services(store: Store, settings: Settings) -> list[BackgroundService]:
    """The organisation sync, when KATalogus is configured."""
    from baton.ingest.katalogus import katalogus_link

    link = katalogus_link(store, settings)
    if link is None:
        return []
    return [KatalogusOrganisationSync(store, settings, link.katalogus, link.recorder)]
