"""Director (leader) mode: keep exactly one scheduler per (organisation, type) running.

Each round the leading director compares what should run (one scheduler per scheduler row in the
database, i.e. per organisation and type) with what its runner runs, starts what is missing, stops
what is no longer wanted, restarts what died and what stopped heartbeating. Every step is
idempotent, so a restarted director simply converges again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select

from baton.config import Settings
from baton.leader import LeaderElector, SingleProcessLeader
from baton.logs import get_logger
from baton.models import LeaderRecord, Organisation, Scheduler, SchedulerState, SchedulerType, utcnow
from baton.queue import requeue_stuck
from baton.runners import Runner
from baton.schedulers import SchedulerSpec
from baton.store import Store, process_location

log = get_logger("baton.director")
DIRECTOR_ROLE = "director"


@dataclass
class ReconcileReport:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    requeued: int = 0
    failed: int = 0


class Director:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        runner: Runner,
        elector: LeaderElector | None = None,
        holder: str | None = None,
    ) -> None:
        self.holder = holder or process_location()
        self.store = store
        self.settings = settings
        self.runner = runner
        self.elector = elector or SingleProcessLeader()
        self.is_leader = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def desired(self) -> set[SchedulerSpec]:
        with self.store.session() as session:
            rows = session.execute(
                select(Scheduler.organisation, Scheduler.type).join(
                    Organisation, Organisation.id == Scheduler.organisation
                )
            ).all()
        return {SchedulerSpec(organisation, SchedulerType(kind)) for organisation, kind in rows}

    def stale_heartbeats(self, specs: set[SchedulerSpec]) -> set[str]:
        """Schedulers we run whose heartbeat is older than the timeout: hung, or dead unnoticed."""
        cutoff = utcnow() - timedelta(seconds=self.settings.heartbeat_timeout_seconds)
        ids = {spec.id for spec in specs}
        with self.store.session() as session:
            rows = session.execute(
                select(Scheduler.id, Scheduler.heartbeat_at, Scheduler.state).where(Scheduler.id.in_(ids))
            ).all()
        return {
            scheduler_id
            for scheduler_id, heartbeat_at, state in rows
            if state == SchedulerState.RUNNING.value and heartbeat_at is not None and heartbeat_at < cutoff
        }

    def record_leadership(self) -> None:
        """Report (not decide) who leads: a row other replicas' /metrics and the failover harness read."""
        now = utcnow()
        with self.store.session() as session:
            row = session.get(LeaderRecord, DIRECTOR_ROLE)
            if row is None:
                session.add(LeaderRecord(role=DIRECTOR_ROLE, holder=self.holder, acquired_at=now, renewed_at=now))
                return
            if row.holder != self.holder:
                row.holder = self.holder
                row.acquired_at = now
            row.renewed_at = now

    def recover_stuck_tasks(self) -> tuple[int, int]:
        """Re-queue tasks whose runner went silent (SKIP LOCKED: safe even if two leaders overlap)."""
        cutoff = utcnow() - timedelta(seconds=self.settings.task_timeout_seconds)
        with self.store.session() as session:
            requeued, failed = requeue_stuck(session, older_than=cutoff, max_attempts=self.settings.task_max_attempts)
        if requeued or failed:
            log.warning("recovered stuck tasks", requeued=requeued, failed=failed)
        return requeued, failed

    def reconcile(self) -> ReconcileReport:
        report = ReconcileReport(restarted=self.runner.supervise())
        desired = self.desired()
        actual = set(self.runner.list())
        for spec in sorted(desired - actual):
            self.runner.start(spec)
            report.started.append(spec.id)
        for spec in sorted(actual - desired):
            self.runner.stop(spec.id)
            report.stopped.append(spec.id)
        for scheduler_id in sorted(self.stale_heartbeats(desired & actual)):
            log.warning("stale heartbeat; restarting scheduler", scheduler=scheduler_id)
            self.runner.restart(scheduler_id)
            report.restarted.append(scheduler_id)
        if report.started or report.stopped or report.restarted:
            log.info("reconciled", started=report.started, stopped=report.stopped, restarted=report.restarted)
        return report

    def step(self) -> ReconcileReport | None:
        """One round: renew leadership, then reconcile if leading. A lost lead stops everything."""
        leading = self.elector.acquire_or_renew()
        if not leading:
            if self.is_leader:
                log.warning("lost leadership; stopping local schedulers")
                self.runner.shutdown()
            self.is_leader = False
            return None
        self.is_leader = True
        self.record_leadership()
        report = self.reconcile()
        report.requeued, report.failed = self.recover_stuck_tasks()
        return report

    def run(self) -> None:
        log.info("director running", runner=self.runner.name)
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("reconcile round failed; retrying")
            self._stop.wait(self.settings.reconcile_interval_seconds)

    def start_in_background(self) -> None:
        self._thread = threading.Thread(target=self.run, name="director", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.runner.shutdown(timeout)
        self.elector.release()
        self.is_leader = False
