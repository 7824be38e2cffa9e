"""Schedulers: one per (organisation, type). They ingest events and rank work into their queue.

The same classes run in a thread, in a child process or in a Kubernetes pod: a scheduler only needs
a `SchedulerContext` (store, settings, where it runs, where its events come from).

This module is what every scheduler shares: its lifecycle (claim, take, begin, step, end), the one
way it writes (a fenced transaction), pauses and back-off. event_driven.py turns events into work;
planners/ holds what each type of scheduler makes of them, each planner given a `Planning`
(planning.py), never the scheduler; registry.py builds one by its type.

An idle scheduler whose inputs its process looks for (the database inbox, schedules: wakeups.py)
pauses until it is woken, not for a poll interval: ten thousand organisations' schedulers then cost
next to nothing while nothing happens. Other sources (RabbitMQ, in-process queues) are polled every
poll interval.
"""

from __future__ import annotations

import random
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from structlog.typing import FilteringBoundLogger

from baton.core.errors import DatabaseUnavailableError, FencedError
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType, utcnow
from baton.core.settings import Settings
from baton.ingest.catalogue.lookups import DatabaseCatalogue, PluginCatalogue
from baton.ingest.events import DatabaseInbox, EventSource
from baton.ingest.ownership import Ownership
from baton.ingest.planning import Planning, scheduler_log
from baton.ingest.wakeups import InputWakeups
from baton.storage.control.scheduler_leases import Claim, fenced_before_first_write
from baton.storage.engine import Session, Store
from baton.storage.errors import DATABASE

if TYPE_CHECKING:  # only a process with KATalogus configured loads the HTTP clients
    from baton.ingest.outside_links import OutsideLinks

# A scheduler that met a database outage tries again this soon (or sooner: its poll interval), so it
# resumes within a second of the database taking writes; the outage is logged once per process
# (storage/errors.py's tracker), never per attempt.
DATABASE_RETRY_SECONDS = 1.0
# The longest an idle scheduler waits for a wake-up before it looks for itself once. The safety net
# for a notification lost is its process's look every poll interval (wakeups.py), which costs one
# statement whatever the number of schedulers; a turn each, even hourly, would cost 30,000 idle
# schedulers ~8 turns a second (~1.5 CPU-s a minute: an idle turn costs ~3 ms of CPU, measured). This one
# only bounds a wake-up that never comes.
IDLE_TURN_SECONDS = 86_400.0


def default_source(spec: SchedulerSpec) -> EventSource | None:
    return None if spec.type is SchedulerType.REPORT else DatabaseInbox(spec.id)


@dataclass
class SchedulerContext:
    store: Store
    settings: Settings
    runner: str
    location: str
    source_factory: Callable[[SchedulerSpec], EventSource | None] = default_source
    catalogue: PluginCatalogue = field(default_factory=DatabaseCatalogue)
    clock: Callable[[], datetime] = utcnow
    ownership: Ownership | None = None  # shared by the schedulers of one process; made on first use
    links: OutsideLinks | None = None  # KATalogus as the catalogue, Octopoes, Bytes; None: Baton's own
    input_wakeups: InputWakeups | None = None  # likewise

    def leases(self) -> Ownership:
        if self.ownership is None:
            self.ownership = Ownership(
                self.store, self.settings.leases, hung_after_seconds=self.settings.timing.heartbeat_timeout_seconds
            )
        return self.ownership

    def wakeups(self) -> InputWakeups:
        if self.input_wakeups is None:
            self.input_wakeups = InputWakeups(self.store, self.settings.timing.poll_interval_seconds)
        return self.input_wakeups

    def stop_wakeups(self, timeout: float = 5.0) -> None:
        if self.input_wakeups is not None:
            self.input_wakeups.stop(timeout)


class Scheduler(ABC):
    """Lifecycle: `run()` claims the scheduler's row, loops until `stop()` (or until the claim is
    lost) and gives the row up. Its state and heartbeat ride on the process's lease renewals."""

    type: ClassVar[SchedulerType]
    batch_size: ClassVar[int] = 100

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        self.spec = spec
        self.context = context
        self.store = context.store
        self.settings = context.settings
        self.claim = claim
        self._stopping = False
        self._lost: str | None = None
        self.enabled = True
        self.state = SchedulerState.STOPPED
        self._final = SchedulerState.STOPPED  # the state its row is given up with
        self._pause = 0.0
        self._woken = False  # input arrived since its turn began: the next turn comes at once
        self.waker: Callable[[], None] | None = None  # how whoever runs it brings its next turn forward
        self.planning = Planning(
            spec,
            context.settings,
            context.store,
            context.catalogue,
            context.clock,
            self.transaction,
            self.pause,
            context.runner,
            context.links,
        )

    @property
    def id(self) -> str:
        return self.spec.id

    def stop(self) -> None:
        self._stopping = True
        if self.waker is not None:
            self.waker()

    def wake(self) -> None:
        """Input waits for this scheduler: its next turn comes now (or right after the one running,
        which may have looked before the input was there)."""
        self._woken = True
        if self.waker is not None:
            self.waker()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def log(self) -> FilteringBoundLogger:
        return scheduler_log(self.spec.id, self.context.runner)

    # -- ownership (Lessee) -------------------------------------------------------------------------

    def lease_lost(self, reason: str) -> None:
        """Someone else runs this scheduler now (or may soon): stop at once, write nothing more."""
        if self._lost is None:
            self._lost = reason
            # In a database outage this is its expected consequence (the outage is logged already).
            say = self.log.warning if DATABASE.available else self.log.info
            say("scheduler lost its lease; stopping without writing", reason=reason)
        self.stop()

    def set_enabled(self, enabled: bool) -> None:
        was, self.enabled = self.enabled, enabled
        if enabled and not was:
            self.wake()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """The one way a scheduler writes: one transaction in which its first write is preceded by
        the fencing check of its claim (storage/control/scheduler_leases.py), so nothing commits once another term
        holds the row. A round that only reads (an empty inbox) costs no check."""
        if self._lost is not None:
            raise FencedError(self._lost)
        claim = self.claim or self._claim()  # run() claims first; a tick driven directly claims here
        if claim is None:
            raise FencedError(f"scheduler '{self.id}' is held by another owner (or its organisation is gone)")
        with self.store.session() as session, fenced_before_first_write(session, claim):
            yield session

    def _report(self, state: SchedulerState) -> None:
        self.state = state
        self.context.leases().report(self.id, state.value)

    def try_claim(self) -> Claim | None:
        """The scheduler's claim: the one it has, or one attempt at its row (None: held elsewhere,
        or the database is unavailable now: try again later)."""
        if self.claim is None:
            try:
                self._claim()
            except DatabaseUnavailableError:
                return None
        return self.claim

    def _claim(self) -> Claim | None:
        """One attempt at the scheduler's row; raises DatabaseUnavailableError in an outage."""
        self.claim = self.context.leases().claim([self.id], runner=self.context.runner).get(self.id)
        return self.claim

    def _wait_for_claim(self, stopped: threading.Event) -> Claim | None:
        """A previous instance that died without giving the row up holds it until its lease ends:
        wait for that (or for a stop) rather than fail and be restarted in a loop."""
        said = False
        while not self._stopping:
            claim = self.try_claim()
            if claim is not None:
                return claim
            if not DATABASE.available:  # not held elsewhere: the database is away (logged once)
                stopped.wait(self._back_off_seconds())
                continue
            if not said:
                self.log.info("waiting for the scheduler's lease to be free (held elsewhere, or organisation gone)")
                said = True
            stopped.wait(self.settings.leases.retry_period_seconds)
            stopped.clear()
        return None

    def run(self) -> None:
        """A scheduler with a thread (or a process) of its own: claim, loop until stopped, give up.
        The thread runner's schedulers take turns on a few threads instead (control/tickpool.py),
        through the same `try_claim`, `take`, `begin`, `step` and `end`."""
        self.context.leases().start_in_background()
        turn_now = threading.Event()  # set by a stop and by a wake-up
        self.waker = turn_now.set
        claim = self._wait_for_claim(turn_now)
        if claim is None:
            return
        self.take(claim)
        try:
            self.begin()
            pause = self.first_tick_delay()
            while not self._stopping:
                turn_now.wait(pause)
                turn_now.clear()
                if not self._stopping:
                    pause = self.step()
        except Exception:
            self.failed()
            raise
        finally:
            self.end()

    def take(self, claim: Claim) -> None:
        """Renew `claim` from now on on this scheduler's behalf (a claimed row is never left unheld)."""
        self.claim = claim
        self.context.leases().hold(claim, self)

    def begin(self) -> None:
        if self.claim is not None:
            self.log.info("scheduler starting", term=self.claim.term, owner=self.claim.owner)
        self._report(SchedulerState.STARTING)
        self.setup()
        self._report(SchedulerState.RUNNING)
        self.context.wakeups().register(self.id, self.wake)

    def step(self) -> float:
        """One turn: tick (unless the queue is disabled); the seconds to pause before the next turn.
        Raises what a tick raises, but for the fencing refusal (the scheduler stops) and an
        unreachable database (it backs off)."""
        self._woken = False
        self._report(SchedulerState.RUNNING)
        return self._next_turn_in(self._turn())

    def _next_turn_in(self, pause: float) -> float:
        """The pause before the next turn (none when woken meanwhile); not hung until it is over."""
        if self._woken:
            pause = 0.0
        self.context.leases().expect(self.id, pause)
        return pause

    def _turn(self) -> float:
        if not self.enabled:
            return self.idle_pause()
        try:
            done = self.tick()
        except FencedError as exc:
            self.lease_lost(str(exc))
            return 0.0
        except DatabaseUnavailableError:  # also: every pooled connection busy (many schedulers)
            return self._back_off_seconds()  # the outage is logged once per process, not per scheduler
        requested, self._pause = self._pause, 0.0
        return max(requested, 0.0 if done and not self.caught_up() else self.idle_pause())

    def caught_up(self) -> bool:
        """Whether the tick, though it did work, left nothing its wake-ups would not announce: then
        the next turn waits to be woken instead of coming at once to find nothing. A burst across
        every organisation would otherwise leave a turn per scheduler behind it, and an event of
        a quiet organisation would wait behind all of them for a thread. No by default."""
        return False

    def idle_pause(self) -> float:
        """How long to wait when there was nothing to do: until woken (its process looks for its
        inputs), or a poll interval for inputs nobody else looks for."""
        if not self.inputs_announced():
            return self.settings.timing.poll_interval_seconds
        return IDLE_TURN_SECONDS * random.uniform(0.9, 1.0)  # spread: the safety-net turns do not come in step

    def inputs_announced(self) -> bool:
        """Whether its process looks for every input of this scheduler and wakes it (wakeups.py):
        schedules are; event sources say so themselves."""
        return True

    def pause(self, seconds: float) -> None:
        """Ask for a pause after this tick (a tick never sleeps: it may share its thread)."""
        self._pause = max(self._pause, seconds)

    def _back_off_seconds(self) -> float:
        return min(DATABASE_RETRY_SECONDS, self.settings.timing.poll_interval_seconds * 5)

    def failed(self) -> None:
        """The loop raised: log it (a database outage in one line: it is logged as an outage too;
        anything else with its traceback); the row is given up as failed."""
        error = sys.exc_info()[1]
        if isinstance(error, DatabaseUnavailableError):
            self.log.info("scheduler stopped by a database outage", reason=error.reason)
        else:
            self.log.exception("scheduler failed")
        self._final = SchedulerState.FAILED

    def end(self) -> None:
        self.context.wakeups().unregister(self.id, self.wake)
        try:
            self.teardown()
        finally:
            if self.claim is not None:
                self._give_up(self.claim, self._final)

    def first_tick_delay(self) -> float:
        """Schedulers often start by the thousand (a worker taking over a peer's share, a director's
        first round): their first ticks are spread over one poll interval, so the ones started first
        do not hold the interpreter and the pool while the rest are still being started. One whose
        inputs are announced takes no first tick: its process's next look (within a poll interval)
        wakes it if input waits; unless a previous owner left work in the database that no look
        announces (`left_over_work`)."""
        if self.inputs_announced() and not self._finds_left_over_work():
            return self._next_turn_in(self.idle_pause())
        return self._next_turn_in(random.uniform(0, self.settings.timing.poll_interval_seconds))

    def left_over_work(self) -> bool:
        """Whether work noted in the database that its process's looks do not announce (events and due
        schedules they do) waits for this scheduler: left by a previous owner that died. No by default."""
        return False

    def _finds_left_over_work(self) -> bool:
        try:
            return self.left_over_work()
        except DatabaseUnavailableError:  # the first turn will find out (and back off)
            return True

    def _give_up(self, claim: Claim, state: SchedulerState) -> None:
        self.state = state
        if self._lost is not None:
            self.context.leases().forget(self.id)
            return
        try:
            self.context.leases().release(claim, state.value)
        except DatabaseUnavailableError:  # it may be why we are stopping (logged as an outage): the lease expires
            self.log.info("scheduler stopped; its lease expires (database unavailable)", state=state.value)
            return
        except Exception:
            self.log.warning("could not release the scheduler's lease", state=state.value)
        self.log.info("scheduler stopped", state=state.value)

    def setup(self) -> None:
        """Hook run once before the loop (open connections, etc.)."""
        return None

    def teardown(self) -> None:
        """Hook run once after the loop."""
        return None

    @abstractmethod
    def tick(self) -> int:
        """Do one round of work; return how much was done (0 lets the loop sleep)."""
