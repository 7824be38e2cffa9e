"""Organisations from KATalogus (when BATON_KATALOGUS_URL is set): every poll, `GET /v1/organisations`;
an organisation KATalogus lists gets its Baton organisation (and so its schedulers, started by the
director or the workers), one that KATalogus created here and no longer lists is retired, and a retired
one it lists again comes back. Retiring deletes nothing: the organisation's schedulers stop, its queues
take and hand out no task, and its tasks and schedules stay readable (`GET /tasks`, `/schedules`, rocky),
so it comes back with its history (storage/control/organisation_sync.py). Deleting an organisation with its data
is an operator's explicit `DELETE /organisations/{id}`, never this sync's.

Every process that watches organisations (directors, workers: where the RabbitMQ watcher runs too) runs
this service, but only the holder of the `katalogus` leadership lease polls, and it writes only while the
lease is still its own, checked and locked in the transaction that writes (storage/control/leadership.py
`leads_now`). So two listings never race: a stale one (read before a retirement, written after it) can
only come from a holder that lost the lease meanwhile, and its write is refused. What a listing cannot
undo is a change made in Baton itself: an organisation deleted through the API while KATalogus still
lists it comes back (empty) at the next poll, as KATalogus is where organisations are made.

Retirement is guarded: a failed listing changes nothing (the client logs the outage once), and a listing
without any organisation retires nothing (core/catalogue.py `organisations_to_retire`). Organisations
made in Baton (the API, a RabbitMQ organisation message) are never retired by the sync; one made because
a message or a push named it (`source` "auto") becomes KATalogus' once KATalogus lists it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from baton.control.leadership import DatabaseLeaseLeader, LeaderElector
from baton.core.catalogue import KATALOGUS_SOURCE, organisations_to_restore, organisations_to_retire
from baton.core.errors import DatabaseUnavailableError, OutsideServiceError
from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService
from baton.ingest.outside_links import OutsideServiceRecorder
from baton.openkat import KatalogusClient
from baton.storage.control.leadership import leads_now
from baton.storage.control.organisation_sync import (
    add_katalogus_organisation,
    adopt_auto_organisations,
    organisation_ids,
    restore_organisations,
    retire_organisations,
    retired_ids,
)
from baton.storage.engine import Store

log = get_logger("baton.katalogus")
KATALOGUS_ROLE = "katalogus"
KATALOGUS_LOCK_KEY = 0x0BA7_0003  # its leader's liveness lock (the director's is 0x0BA7_0002)


@dataclass
class OrganisationSyncRound:
    added: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
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
            retired = retired_ids(session)
            round_.restored = restore_organisations(session, organisations_to_restore(listing.keys(), retired))
            active = organisation_ids(session, KATALOGUS_SOURCE) - retired
            round_.retired = retire_organisations(session, organisations_to_retire(listing.keys(), active), utcnow())
        if round_.added or round_.adopted or round_.retired or round_.restored:
            log.info(
                "organisations from KATalogus",
                added=round_.added,
                adopted=round_.adopted,
                retired=round_.retired,
                restored=round_.restored,
            )
        if not listing and not self._said_empty:
            log.warning("KATalogus lists no organisation; retiring none", kept=len(active))
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
    from baton.ingest.outside_links import outside_links

    links = outside_links(store, settings)
    if links is None:
        return []
    return [KatalogusOrganisationSync(store, settings, links.katalogus, links.recorder)]
