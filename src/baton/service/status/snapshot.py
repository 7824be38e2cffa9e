"""The estate in numbers for the status page: organisations, schedulers by state, totals per type
(queued, in flight, failed in the last hour, oldest queued, full queues), each by aggregate SQL
(`storage/queues/listings.py`, `storage/queues/status_reads.py`), never by listing the estate.

Aggregates still read every scheduler row: at 30,000 schedulers the snapshot costs tens of
milliseconds, and every open status page asks for it every two seconds. So a large estate's snapshot
(from LARGE_ESTATE schedulers) is shared by the requests of one process for a while: until it is
older than ten times what it took to take (the page then spends at most a tenth of one connection's
time on it, however many people watch), and at least MIN_AGE seconds. A smaller estate's is taken
afresh for every request: cheap, and always current."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from baton.core.model import utcnow
from baton.core.views import EstateCounts, EstateReading
from baton.service.status.overview import FAILED_WINDOW, Totals, type_rows

LARGE_ESTATE = 3_000  # schedulers (1,000 organisations)
MIN_AGE = 2.0  # seconds: the page's own refresh
COST_SHARE = 0.1


@dataclass(frozen=True)
class EstateSnapshot:
    taken_at: datetime
    estate: EstateCounts
    by_type: list[Totals]
    failed: dict[str, int]  # failures of the last hour per queue
    failed_capped: bool
    cost_seconds: float


class EstateRecords(Protocol):
    """The estate's aggregates (storage/ports/status.py)."""

    def estate(self, now: datetime, heartbeat_timeout: float, failed_since: datetime) -> EstateReading: ...


def take_snapshot(records: EstateRecords, heartbeat_timeout: float) -> EstateSnapshot:
    started = time.monotonic()
    now = utcnow()
    reading = records.estate(now, heartbeat_timeout, now - FAILED_WINDOW)
    by_type = type_rows(reading, now)
    return EstateSnapshot(
        now, reading.estate, by_type, reading.failed, reading.failed_capped, time.monotonic() - started
    )


class SnapshotCache:
    """One process's estate snapshot, shared as the module says; `clock`: monotonic seconds."""

    def __init__(
        self,
        take: Callable[[], EstateSnapshot],
        large_from: int = LARGE_ESTATE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.take = take
        self.large_from = large_from
        self.clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, EstateSnapshot] | None = None

    def current(self) -> EstateSnapshot:
        with self._lock:  # one request takes it; the others wait for it rather than take their own
            if self._cached is not None and self.fresh_enough(*self._cached):
                return self._cached[1]
            snapshot = self.take()
            self._cached = (self.clock(), snapshot)
            return snapshot

    def fresh_enough(self, taken: float, snapshot: EstateSnapshot) -> bool:
        if snapshot.estate.schedulers < self.large_from:
            return False
        return self.clock() - taken < max(MIN_AGE, snapshot.cost_seconds / COST_SHARE)
