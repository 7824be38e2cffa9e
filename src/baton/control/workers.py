"""Worker mode: `baton worker` processes share every scheduler between them through the database,
so Kubernetes' own replication (a Deployment, an autoscaler) decides how many run.

Each round a worker heartbeats its `workers` row, computes its fair share (every scheduler of an
existing organisation, divided by the live workers, rounded up), gives up what it holds above that
share (a new peer joined) and claims unowned or expired schedulers up to it (a peer left or died).
Rounds come every second while the shares change, and every few seconds once they hold still: a peer
joining, leaving or giving schedulers up, and an organisation created or deleted, wake every worker
at once (LISTEN/NOTIFY), and a peer that dies is noticed when its leases end.
Its schedulers take turns on a few threads (control/tickpool.py); their leases and fencing are the
same as a director's (storage/control/scheduler_leases.py, ingest/ownership.py), so a scheduler never runs in two
places at once. SIGTERM releases everything first, so peers pick it up on their next round.
"""

from __future__ import annotations

from dataclasses import dataclass

from baton.control.runners import ThreadRunner
from baton.core.errors import DatabaseUnavailableError
from baton.core.leases import fair_share, idle_round_seconds, next_round_in, surplus
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.pool_changes import PoolChanges, announce_pool_change
from baton.storage.control.workers import (
    count_schedulers,
    heartbeat_worker,
    live_workers,
    remove_worker,
    seconds_until_a_peer_lease_ends,
)
from baton.storage.engine import Store

log = get_logger("baton.worker")
RUNNER_NAME = "worker"


@dataclass
class WorkerRound:
    live_workers: int
    share: int
    claimed: list[str]
    released: list[str]
    running: int
    next_lease_end_s: float | None = None  # when a peer's lease (a scheduler's or its own) runs out next

    @property
    def settled(self) -> bool:
        """Nothing claimed or given up, and the share held: nothing to do until something changes."""
        return not self.claimed and not self.released and self.running == self.share


class Worker(BackgroundService):
    thread_name = "worker"

    def __init__(self, store: Store, settings: Settings, context: SchedulerContext) -> None:
        super().__init__()
        self.store = store
        self.settings = settings
        self.ownership = context.leases()
        self.id = self.ownership.owner
        self.runner = ThreadRunner(context)
        self.round_seconds = min(1.0, settings.leases.retry_period_seconds)
        self.idle_round_seconds = idle_round_seconds(self.round_seconds, settings.leases.lease_seconds)
        self.pool_changes = PoolChanges(store.address, self._stop)
        self._joined = False

    def step(self) -> WorkerRound:
        lease = self.settings.leases.lease_seconds
        with self.store.control_session() as session:
            heartbeat_worker(session, self.id, lease)
            if not self._joined:
                announce_pool_change(session)  # peers above their new share release now
                self._joined = True
            live = len(live_workers(session))
            share = fair_share(count_schedulers(session), live)
            next_lease_end = seconds_until_a_peer_lease_ends(session, self.id)
        self.runner.forget_dead()
        running = self.runner.ids()
        released = self._release_above(share, running)
        kept = running.difference(released)
        claimed = self._claim_up_to(share, kept)
        if claimed or released:
            log.info("rebalanced", worker=self.id, live_workers=live, share=share, claimed=claimed, released=released)
        return WorkerRound(live, share, claimed, released, len(kept) + len(claimed), next_lease_end)

    def _until_next_round(self, last: WorkerRound | None) -> float:
        """A round's time while shares change, a longer one once they hold still, or less when a
        peer's lease ends sooner: a dead peer's share and schedulers are then taken within
        milliseconds of their leases' end, not up to a round later."""
        settled = last is not None and last.settled
        every = self.idle_round_seconds if settled else self.round_seconds
        return next_round_in(every, last.next_lease_end_s if last is not None else None)

    def _release_above(self, share: int, running: set[str]) -> list[str]:
        """Give the surplus rows up in one statement first (peers claim them in their next round),
        then tell those schedulers to stop without waiting for them: until they do, their writes
        are fenced."""
        if len(running) <= share:
            return []
        above = surplus(running, share)
        self.ownership.release_many(above, "stopped", announce=True)
        self.runner.stop_many(above, wait=False)
        return above

    def _claim_up_to(self, share: int, running: set[str]) -> list[str]:
        if len(running) >= share:
            return []
        claims = self.ownership.claim_unowned(share - len(running), runner=RUNNER_NAME, running_here=sorted(running))
        return self.runner.launch_claimed([(SchedulerSpec.parse(claim.scheduler_id), claim) for claim in claims])

    def run(self) -> None:
        log.info("worker running", worker=self.id)
        self.ownership.start_in_background()
        while not self.stopping:
            last: WorkerRound | None = None
            try:
                last = self.step()
            except DatabaseUnavailableError:
                pass  # logged once, as an outage (storage/errors.py)
            except Exception as exc:
                log.warning("worker round failed; retrying", error=str(exc).splitlines()[0])
            if not self.stopping:  # or until a peer joins, leaves or gives schedulers up
                self.pool_changes.wait(self._until_next_round(last))
        self.pool_changes.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Hand over before anything else: the rows are given up in the first milliseconds, while
        the round in progress and the schedulers wind down (their writes fenced meanwhile)."""
        self._stop.set()
        self.leave()
        super().stop(timeout)

    def leave(self) -> None:
        """Leave the pool first (peers' shares grow at once), then hand every scheduler back."""
        try:
            with self.store.control_session() as session:
                remove_worker(session, self.id)
                announce_pool_change(session)
        except Exception:
            log.warning("could not remove the worker's row; it expires", worker=self.id)
        try:
            released = self.ownership.release_all("stopped", announce=True)
            log.info("handed every scheduler over", worker=self.id, released=released)
        except Exception:
            log.warning("could not release the leases; they expire", worker=self.id)

    def stopped(self, timeout: float) -> None:
        self.runner.shutdown(timeout)
        self.ownership.stop(timeout)
        log.info("worker stopped", worker=self.id)
