"""Housekeeping: recover tasks nobody reports on (core/recovery.py), settle retired organisations
(storage/control/organisation_sync.py), remove finished tasks and the inbox events consumed past their retention
(`BATON_TASK_RETENTION_DAYS`, off by default; `BATON_EVENT_RETENTION_DAYS`), and settle the pop receipts
an API process remembered to settle once more but did not live to (service/receipts.py).

The leading director does both in each of its rounds (control/director.py). Where no director runs
(`baton worker`s share the schedulers), a `Housekeeper` in every worker does it, and one worker at a
time: the one holding the `housekeeper` lease (a `leaders` row like the director's, renewed each
retry period, taken over when its holder dies). The lease only saves work, safety does not rest
on it: recovery and removal lock what they change with SKIP LOCKED, so two housekeepers (or a
director beside workers) never take the same task twice.

Removal is paced so that pops and pushes keep the database: a batch of 1,000 tasks per short
transaction, then a pause as long as the batch took (one connection busy half the time at most),
for at most a second per round; a backlog of millions is worked off over several minutes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from baton.control.leadership import DatabaseLeaseLeader, LeaderElector
from baton.core.errors import DatabaseUnavailableError
from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.recovery import RecoveryRule
from baton.core.retention import pause_after, retention_cutoff
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService
from baton.storage.control.leadership import HOUSEKEEPER_LIVENESS_LOCK_KEY, HOUSEKEEPER_ROLE
from baton.storage.control.organisation_sync import settle_retired
from baton.storage.engine import Store
from baton.storage.queues.receipts import delete_expired_keys, settle_remembered
from baton.storage.queues.retention import delete_consumed_events, delete_finished
from baton.storage.queues.task_rows import recover_stuck

log = get_logger("baton.housekeeping")

RETENTION_BATCH = 1_000
RETENTION_SHARE = 0.5  # of one connection's time, while removing
RETENTION_SECONDS_PER_ROUND = 1.0


@dataclass
class HousekeepingReport:
    requeued: int = 0
    failed: int = 0
    removed: int = 0


class Housekeeping:
    """The work itself, one round at a time; whoever calls it decides who may (see the module)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settings = settings
        self._stop = stop or threading.Event()  # cuts a round's pauses short
        self._clock = clock
        self.rule = RecoveryRule.from_settings(settings)

    def round(self) -> HousekeepingReport:
        requeued, failed = self.recover_stuck_tasks()
        self.settle_retired_organisations()
        return HousekeepingReport(requeued, failed, self.tidy())

    def tidy(self) -> int:
        """What a round does besides recovering stuck tasks and settling retired organisations (what a
        director does under its leadership): remove what retention no longer keeps (how many tasks),
        forget expired idempotency keys, settle remembered pop receipts."""
        removed = self.remove_expired()
        self.forget_expired_keys()
        self.settle_remembered_pops()
        return removed

    def settle_remembered_pops(self) -> int:
        """Pop receipts an API process remembered to settle once more and did not (it died): settled now
        (service/receipts.py); how many tasks went back to their queue."""
        with self.store.session() as session:
            requeued = settle_remembered(session, utcnow())
        if requeued:
            log.info("handed back the tasks of pops whose API process did not settle them", tasks=requeued)
        return requeued

    def forget_expired_keys(self) -> int:
        """Idempotency keys of pops past BATON_POP_RECEIPT_SECONDS (a few rows: one statement)."""
        with self.store.session() as session:
            return delete_expired_keys(session, utcnow())

    def recover_stuck_tasks(self) -> tuple[int, int]:
        """Hand out again the dispatched tasks nobody started, fail the running ones past their limit
        (core/recovery.py; SKIP LOCKED: safe even if two leaders overlap). (handed out again, failed)."""
        with self.store.control_session() as session:
            requeued, failed = recover_stuck(session, self.rule, utcnow())
        if requeued or failed:
            log.warning("recovered stuck tasks", requeued=requeued, failed=failed)
        return requeued, failed

    def settle_retired_organisations(self) -> tuple[int, int]:
        """Retired organisations keep nothing queued and nothing claimed (storage/control/organisation_sync.py):
        a task back in a retired queue since (a runner handed it back, recovery handed it out again) is
        cancelled, a claim taken meanwhile revoked. (cancelled, revoked)."""
        with self.store.control_session() as session:
            cancelled, revoked = settle_retired(session, utcnow())
        if cancelled or revoked:
            log.info("settled retired organisations", cancelled_tasks=cancelled, revoked_claims=revoked)
        return cancelled, revoked

    def remove_expired(self, seconds: float = RETENTION_SECONDS_PER_ROUND) -> int:
        """Remove finished tasks past their retention (BATON_TASK_RETENTION_DAYS) and consumed events past
        theirs (BATON_EVENT_RETENTION_DAYS), batch by batch, for about `seconds` at most (the rest waits
        for the next round); how many tasks were removed."""
        now, recovery = utcnow(), self.settings.recovery
        task_cutoff = retention_cutoff(now, recovery.task_retention_days)
        event_cutoff = retention_cutoff(now, recovery.event_retention_days)
        if task_cutoff is None and event_cutoff is None:
            return 0
        deadline = self._clock() + seconds
        removed = events = 0
        while not self._stop.is_set():
            started = self._clock()
            batch = event_batch = 0
            with self.store.session() as session:
                if task_cutoff is not None:
                    batch = delete_finished(session, task_cutoff, RETENTION_BATCH)
                if event_cutoff is not None:
                    event_batch = delete_consumed_events(session, event_cutoff, RETENTION_BATCH)
            removed += batch
            events += event_batch
            pause = pause_after(self._clock() - started, RETENTION_SHARE)
            if max(batch, event_batch) < RETENTION_BATCH or self._clock() + pause >= deadline:
                break
            self._stop.wait(pause)
        if removed or events:
            log.info("removed finished tasks past their retention", removed=removed, consumed_events=events)
        return removed


class Housekeeper(BackgroundService):
    """Housekeeping in a process without a director (a `baton worker`), while it holds the lease."""

    thread_name = "housekeeper"

    def __init__(
        self, store: Store, settings: Settings, elector: LeaderElector | None = None, holder: str | None = None
    ) -> None:
        super().__init__()
        self.housekeeping = Housekeeping(store, settings, self._stop)
        self.elector = elector or DatabaseLeaseLeader(
            store,
            holder or process_location(),
            settings.leases,
            role=HOUSEKEEPER_ROLE,
            liveness_key=HOUSEKEEPER_LIVENESS_LOCK_KEY,
        )
        # A round (at most about a second of removal) plus this stays well inside the renew deadline.
        self.interval = settings.leases.retry_period_seconds

    def step(self) -> HousekeepingReport | None:
        """Renew (or take) the lease; while holding it, one round. None while another process holds it."""
        if not self.elector.acquire_or_renew():
            return None
        return self.housekeeping.round()

    def run(self) -> None:
        while not self.stopping:
            try:
                self.step()
            except DatabaseUnavailableError:
                pass  # the process's outage tracker logs it once, and its end; the next round retries
            except Exception:
                log.exception("housekeeping round failed; retrying")
            self._stop.wait(self.interval)

    def stopped(self, timeout: float) -> None:
        self.elector.release()
