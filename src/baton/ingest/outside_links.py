"""A process's links to OpenKAT's services (with BATON_KATALOGUS_URL set): its clients of KATalogus,
Octopoes and Bytes, shared by its schedulers and its organisation sync, and `call`, the one way a
planner calls one of them.

A call is made outside any transaction. While a service is failing, one caller per process tries it
once per poll (BATON_KATALOGUS_POLL_SECONDS); the others are held back at once rather than each wait
out the client's retries, so an outage does not hold the few threads a worker's schedulers share. The
client logs an outage once when it starts and once when it ends (core/outages.py); after each call
the service's state is recorded where every process reads it (`OutsideServiceRecorder`: /ready,
/metrics and the status page), once per change and once per poll, not once per call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from baton.core.errors import DatabaseUnavailableError, OutsideServiceError
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.outages import Outage
from baton.core.settings import Settings
from baton.storage.engine import Store
from baton.storage.scheduling.service_states import record_outside_service

if TYPE_CHECKING:  # the HTTP clients are loaded only where KATalogus is configured
    from baton.openkat import BytesClient, KatalogusClient, OctopoesClient
    from baton.openkat.http import ServiceClient

T = TypeVar("T")
log = get_logger("baton.katalogus")


class HeldBack(OutsideServiceError):
    """Not called: the service is failing, and this process tries it again only once per poll."""


class OutsideServiceRecorder:
    """Outside services' state as this process sees it, written where every process reads it
    (storage/scheduling/service_states.py): when it changes, and every `refresh_seconds` while it does not,
    so `checked_at` says how fresh the word is."""

    def __init__(self, store: Store, refresh_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._written: dict[str, tuple[float | None, float]] = {}  # service -> (outage start, written at)

    def note(self, client: ServiceClient) -> None:
        """Record the client's service as its outage tracker says it is now."""
        self.record(client.service, client.outages.current)

    def record(self, service: str, outage: Outage | None) -> None:
        since = None if outage is None else outage.since
        now = self._clock()
        with self._lock:
            last = self._written.get(service)
            if last is not None and last[0] == since and now - last[1] < self.refresh_seconds:
                return
            self._written[service] = (since, now)
        down_since = None if outage is None else datetime.fromtimestamp(outage.since, UTC)
        try:
            with self.store.session() as session:
                record_outside_service(
                    session, service, down_since, None if outage is None else outage.reason, utcnow()
                )
        except DatabaseUnavailableError:  # the callers back off on their own; write again next time
            with self._lock:
                self._written.pop(service, None)


@dataclass
class OutsideLinks:
    """The process's clients of KATalogus (the catalogue), Octopoes (objects: rescans, new boefjes, twins)
    and Bytes (when each boefje last ran), shared by its schedulers."""

    katalogus: KatalogusClient
    octopoes: OctopoesClient | None
    poll_seconds: float
    recorder: OutsideServiceRecorder | None = None
    bytes: BytesClient | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_probe: dict[str, datetime] = field(default_factory=dict)
    _empty: bool = False  # the last plugin listing had no plugin

    def call(self, client: ServiceClient, now: datetime, request: Callable[[], T]) -> T:
        """`request`'s answer (a call through `client`). Raises `HeldBack` without calling while the service
        fails and this process tried it less than a poll ago, and `OutsideServiceError` when the call failed
        (the next try a poll from now). Any other error of the request (a 404 a client turns into
        `NotFoundError`, say) is the caller's."""
        if client.outages.current is not None:
            with self._lock:
                if now < self._next_probe.get(client.service, now):
                    raise HeldBack(client.service, "failing; tried again at the next poll")
                self._next_probe[client.service] = now + timedelta(seconds=self.poll_seconds)
        try:
            return request()
        except OutsideServiceError:
            with self._lock:
                self._next_probe[client.service] = now + timedelta(seconds=self.poll_seconds)
            raise
        finally:
            self.observed(client)

    def observed(self, client: ServiceClient) -> None:
        """Record the service's state after a call through `client` (made here or by a caller of its own)."""
        if self.recorder is not None:
            self.recorder.note(client)

    def listed(self, anything: bool) -> bool:
        """Whether a plugin listing had any plugin; one log line when listings start coming back empty,
        one when they no longer do (for the process, not per organisation)."""
        with self._lock:
            changed, self._empty = self._empty == anything, not anything
        if changed:
            if anything:
                log.info("KATalogus lists plugins again")
            else:
                log.warning("KATalogus lists no plugin; organisations keep their last catalogue")
        return anything


_LINKS: dict[tuple[str, str], OutsideLinks] = {}
_LINKS_LOCK = threading.Lock()


def outside_links(store: Store, settings: Settings) -> OutsideLinks | None:
    """The process's links, when KATalogus is configured (None: Baton's own catalogue, no outside call).
    One per process and database, shared by its schedulers and its organisation sync: one connection
    pool per service, one outage tracker, so an outage is logged once by the process, not once per caller."""
    if not settings.openkat.katalogus_url:
        return None
    key = (store.url, settings.openkat.model_dump_json())
    with _LINKS_LOCK:
        if key not in _LINKS:
            from baton.openkat import connect

            clients = connect(settings.openkat)
            assert clients.katalogus is not None  # its URL is set
            poll = settings.openkat.katalogus_poll_seconds
            recorder = OutsideServiceRecorder(store, poll)
            _LINKS[key] = OutsideLinks(clients.katalogus, clients.octopoes, poll, recorder, clients.bytes)
            if clients.octopoes is None:
                log.info("Octopoes is not configured: a newly enabled boefje gets tasks from new events only")
        return _LINKS[key]
