"""Outside services' state (KATalogus, Octopoes, Bytes) as this process sees it, written where every
process reads it (storage/outside_services.py): when it changes, and every `refresh_seconds` while it
does not, so `checked_at` says how fresh the word is. Thousands of schedulers calling through one
process make one write per change, not one per call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from baton.core.errors import DatabaseUnavailableError
from baton.core.model import utcnow
from baton.storage.engine import Store
from baton.storage.outside_services import record_outside_service

if TYPE_CHECKING:
    from baton.core.outages import Outage
    from baton.openkat.http import ServiceClient


class OutsideServiceRecorder:
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
