"""Director (leader) mode: keep exactly one scheduler per (organisation, type) running.

Each round the leading director compares what should run (one scheduler per scheduler row in the
database, i.e. per organisation and type) with what its runner runs, starts what is missing, stops
what is no longer wanted, restarts what died and what stopped heartbeating. Every step is
idempotent, so a restarted director simply converges again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from baton.control.leadership import LeaderElector, SingleProcessLeader
from baton.control.runners import Runner
from baton.core.heartbeat import is_stale
from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec, utcnow
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService
from baton.storage.engine import Store
from baton.storage.leaders import record_leadership
from baton.storage.schedulers import all_specs, heartbeats
from baton.storage.tasks import requeue_stuck

log = get_logger("baton.director")
DIRECTOR_ROLE = "director"


@dataclass
class ReconcileReport:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    requeued: int = 0
    failed: int = 0


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
        # When this director last launched each scheduler: a heartbeat older than that was written by
        # a previous incarnation (e.g. in a dead director's container), not by the one now starting.
        self.launched_at: dict[str, datetime] = {}

    def desired(self) -> set[SchedulerSpec]:
        with self.store.session() as session:
            return all_specs(session)

    def stale_heartbeats(self, specs: set[SchedulerSpec]) -> set[str]:
        """Schedulers we run whose heartbeat went stale (the one rule in core/heartbeat.py): hung, or
        dead unnoticed. A scheduler that has not heartbeated since we launched it (or ever) is still
        starting, not stale, however long that takes: a child process importing Baton on a busy
        machine may need longer than the timeout, and restarting it would only start it over. One
        that dies while starting is restarted by the runner's supervise()."""
        now = utcnow()
        timeout = self.settings.timing.heartbeat_timeout_seconds
        with self.store.session() as session:
            rows = heartbeats(session, {spec.id for spec in specs})
        return {
            scheduler_id
            for scheduler_id, heartbeat_at, state in rows
            if heartbeat_at is not None
            and heartbeat_at >= self.launched_at.get(scheduler_id, heartbeat_at)
            and is_stale(state, heartbeat_at, now, timeout)
        }

    def record_leadership(self) -> None:
        """Report (not decide) who leads: a row other replicas' /metrics and the failover harness read."""
        with self.store.session() as session:
            record_leadership(session, DIRECTOR_ROLE, self.holder)

    def recover_stuck_tasks(self) -> tuple[int, int]:
        """Re-queue tasks whose runner went silent (SKIP LOCKED: safe even if two leaders overlap)."""
        recovery = self.settings.recovery
        cutoff = utcnow() - timedelta(seconds=recovery.task_timeout_seconds)
        with self.store.session() as session:
            requeued, failed = requeue_stuck(session, older_than=cutoff, max_attempts=recovery.task_max_attempts)
        if requeued or failed:
            log.warning("recovered stuck tasks", requeued=requeued, failed=failed)
        return requeued, failed

    def reconcile(self) -> ReconcileReport:
        # Launch times are taken before the launch: a thread may heartbeat before start() returns.
        before_supervise = utcnow()
        report = ReconcileReport(restarted=self.runner.supervise())
        self._launched(report.restarted, before_supervise)
        desired = self.desired()
        actual = set(self.runner.list())
        for spec in sorted(desired - actual):
            self._launched([spec.id], utcnow())
            self.runner.start(spec)
            report.started.append(spec.id)
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

    def step(self) -> ReconcileReport | None:
        """One round: renew leadership, then reconcile if leading. A lost lead stops everything."""
        leading = self.elector.acquire_or_renew()
        if not leading:
            if self.is_leader:
                log.warning("lost leadership; stopping local schedulers")
                self.runner.shutdown()
                self.launched_at.clear()
            self.is_leader = False
            return None
        self.is_leader = True
        self.record_leadership()
        report = self.reconcile()
        report.requeued, report.failed = self.recover_stuck_tasks()
        return report

    def run(self) -> None:
        log.info("director running", runner=self.runner.name)
        while not self.stopping:
            try:
                self.step()
            except Exception:
                log.exception("reconcile round failed; retrying")
            self._stop.wait(self.settings.timing.reconcile_interval_seconds)

    def stopped(self, timeout: float) -> None:
        self.runner.shutdown(timeout)
        self.elector.release()
        self.is_leader = False
