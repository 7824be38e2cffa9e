"""Director (leader) mode: keep exactly one scheduler per (organisation, type) running.

Each round the leading director compares what should run (one scheduler per scheduler row in the
database, i.e. per organisation and type) with what its runner runs, starts what is missing, stops
what is no longer wanted, restarts what died and what stopped heartbeating. Every step is
idempotent, so a restarted director simply converges again. A database outage is logged once (by
storage/errors.py's tracker), not per round; when it ends the director renews and reconciles at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from baton.control.housekeeping import Housekeeping
from baton.control.leadership import LeaderElector, SingleProcessLeader
from baton.control.runners import Runner
from baton.core.errors import DatabaseUnavailableError
from baton.core.heartbeat import is_stale
from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec, utcnow
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService
from baton.storage.control.leadership import DIRECTOR_ROLE, report_leadership
from baton.storage.control.scheduler_leases import revoke_claims
from baton.storage.control.scheduler_rows import all_specs, heartbeats
from baton.storage.engine import Store
from baton.storage.errors import DATABASE

log = get_logger("baton.director")
# How often a standby asks for the lead when the lead is held in the database: its liveness lock is
# freed the moment a leader's connection dies (a killed container), and a standby that asked only
# every retry period (2 s) would take over up to that much later. A look is a statement or two on a
# pooled connection. The leader itself renews every retry period.
STANDBY_RETRY_SECONDS = 0.25


@dataclass
class ReconcileReport:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    requeued: int = 0
    failed: int = 0
    removed: int = 0  # finished tasks past their retention


class Director(BackgroundService):
    thread_name = "director"

    def __init__(
        self,
        store: Store,
        settings: Settings,
        runner: Runner,
        elector: LeaderElector | None = None,
        holder: str | None = None,
    ) -> None:
        super().__init__()
        self.holder = holder or process_location()
        self.store = store
        self.settings = settings
        self.runner = runner
        self.elector = elector or SingleProcessLeader()
        self.is_leader = False
        self.term: int | None = None
        self._said_following = False
        self._office = threading.RLock()  # taking office, stepping down and reconciling never interleave
        self._wake = threading.Event()
        self._renew_now = threading.Event()
        # When this director last launched each scheduler: a heartbeat older than that was written by
        # a previous incarnation (e.g. in a dead director's container), not by the one now starting.
        self.launched_at: dict[str, datetime] = {}
        self.housekeeping = Housekeeping(store, settings, self._stop)

    def desired(self) -> set[SchedulerSpec]:
        with self.store.control_session() as session:
            return all_specs(session)

    def stale_heartbeats(self, specs: set[SchedulerSpec]) -> set[str]:
        """Schedulers we run whose heartbeat went stale (the one rule in core/heartbeat.py): hung, or
        dead unnoticed. A scheduler that has not heartbeated since we launched it (or ever) is still
        starting, not stale, however long that takes: a child process importing Baton on a busy
        machine may need longer than the timeout, and restarting it would only start it over. One
        that dies while starting is restarted by the runner's supervise()."""
        now = utcnow()
        timeout = self.settings.timing.heartbeat_timeout_seconds
        with self.store.control_session() as session:
            rows = heartbeats(session, {spec.id for spec in specs})
        return {
            scheduler_id
            for scheduler_id, heartbeat_at, state in rows
            if heartbeat_at is not None
            and heartbeat_at >= self.launched_at.get(scheduler_id, heartbeat_at)
            and is_stale(state, heartbeat_at, now, timeout)
        }

    def record_leadership(self) -> None:
        """With an elector outside the database (a Kubernetes Lease), report who leads in the
        `leaders` row that /schedulers, /metrics and the status page read."""
        if self.elector.recorded_in_database:
            return
        with self.store.control_session() as session:
            report_leadership(session, DIRECTOR_ROLE, self.holder, self.term or 0, None)

    def take_office(self, term: int | None) -> None:
        """A new term: our runner claims under it and, for schedulers that live and die with their
        director (threads, child processes), what any previous term started is fenced out now."""
        self.is_leader, self.term, self._said_following = True, term, False
        self.runner.follow_leader(term)
        if term is None or not self.runner.revokes_on_takeover:
            return
        with self.store.control_session() as session:
            revoked = revoke_claims(session, term)
        log.info("leading", term=term, revoked_claims=revoked)

    def reconcile(self) -> ReconcileReport:
        # Launch times are taken before the launch: a thread may heartbeat before start() returns.
        before_supervise = utcnow()
        report = ReconcileReport(restarted=self.runner.supervise())
        self._launched(report.restarted, before_supervise)
        desired = self.desired()
        actual = set(self.runner.list())
        to_start = sorted(desired - actual)
        self._launched([spec.id for spec in to_start], utcnow())
        report.started = self.runner.start_many(to_start)
        for spec in sorted(actual - desired):
            self.runner.stop(spec.id)
            self.launched_at.pop(spec.id, None)
            report.stopped.append(spec.id)
        for scheduler_id in sorted(self.stale_heartbeats(desired & actual)):
            log.warning("stale heartbeat; restarting scheduler", scheduler=scheduler_id)
            self._launched([scheduler_id], utcnow())
            self.runner.restart(scheduler_id)
            report.restarted.append(scheduler_id)
        if report.started or report.stopped or report.restarted:
            log.info("reconciled", started=report.started, stopped=report.stopped, restarted=report.restarted)
        return report

    def _launched(self, scheduler_ids: list[str], at: datetime) -> None:
        for scheduler_id in scheduler_ids:
            self.launched_at[scheduler_id] = at

    def keep_leadership(self) -> bool:
        """Acquire or renew the lead; a new term takes office, a lost one stops everything."""
        leading = self.elector.acquire_or_renew()
        with self._office:
            if not leading:
                if self.is_leader:
                    # In a database outage, its expected consequence (the outage is logged already).
                    say = log.warning if DATABASE.available else log.info
                    say("lost leadership; stopping local schedulers", term=self.term)
                    self.runner.shutdown()
                    self.launched_at.clear()
                elif not self._said_following:
                    log.info("another director leads; waiting as a follower", holder=self.holder)
                self._said_following = True
                self.is_leader, self.term = False, None
                return False
            if not self.is_leader or self.elector.term != self.term:
                self.take_office(self.elector.term)
                self._wake.set()  # reconcile at once, not at the next round
        return True

    def step(self, renew: bool = True) -> ReconcileReport | None:
        """One round: (renew leadership, unless a thread of its own does,) then, if leading, reconcile
        and keep house (control/housekeeping.py)."""
        if renew and not self.keep_leadership():
            return None
        with self._office:
            if not self.is_leader:
                return None
            self.record_leadership()
            report = self.reconcile()
            report.requeued, report.failed = self.housekeeping.recover_stuck_tasks()
            self.housekeeping.settle_retired_organisations()
        # Outside the office: stepping down need not wait for it, and a removal after a lost term
        # does no harm (whoever leads next removes the same tasks, each once).
        report.removed = self.housekeeping.tidy()
        return report

    def _renew_until_stopped(self) -> None:
        """Leadership is renewed every retry period in a thread of its own, so a long reconcile
        round (thousands of schedulers to start) never makes a renewal late."""
        while not self.stopping:
            try:
                self.keep_leadership()
            except DatabaseUnavailableError:
                pass  # logged once, as an outage (storage/errors.py); renewed again when it ends
            except Exception:
                log.exception("leadership round failed; retrying")
            self._renew_now.wait(self.next_attempt_in())
            self._renew_now.clear()

    def next_attempt_in(self) -> float:
        """Seconds until the next renewal (leading) or attempt to lead (standing by): a standby on a
        database lease looks every STANDBY_RETRY_SECONDS, so a killed leader is replaced within a
        fraction of a second of its connection dying; electors outside the database (a Kubernetes
        Lease, whose API server should not be asked four times a second) keep the retry period."""
        period = self.settings.leases.retry_period_seconds
        if self.is_leader or not self.elector.recorded_in_database:
            return period
        return min(period, STANDBY_RETRY_SECONDS)

    def run(self) -> None:
        log.info("director running", runner=self.runner.name)
        renewer = threading.Thread(target=self._renew_until_stopped, name="leadership", daemon=True)
        renewer.start()
        unsubscribe = DATABASE.on_recovery(self._database_back)
        try:
            while not self.stopping:
                try:
                    self.step(renew=False)
                except DatabaseUnavailableError:
                    pass  # logged once, as an outage (storage/errors.py); the next round comes when it ends
                except Exception:
                    log.exception("reconcile round failed; retrying")
                self._wake.wait(self.settings.timing.reconcile_interval_seconds)
                self._wake.clear()
        finally:
            unsubscribe()
        renewer.join(10)

    def _database_back(self) -> None:
        """An outage ended: renew and reconcile now, not at the next round."""
        self._renew_now.set()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._renew_now.set()
        super().stop(timeout)

    def stopped(self, timeout: float) -> None:
        self.runner.shutdown(timeout)
        self.elector.release()
        self.is_leader, self.term = False, None
