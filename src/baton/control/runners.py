"""Runners: where schedulers live. One interface; threads, child processes or (k8s.py) pods.

The director calls `start`, `stop`, `list`, `status` and, once per reconcile round, `supervise`,
which restarts schedulers that died, with exponential backoff. The scheduler code is the same in
every runner: the thread runner takes it through its turns on a few shared threads (tickpool.py), a
child process runs `baton standalone`, which calls `Scheduler.run()` (forked from a pre-imported fork
server: control/forking.py).
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from baton.control.forking import Child, ExecutedChild, ForkServer, fork_server_supported, stop_children
from baton.control.tickpool import TickPool, Turns
from baton.core.backoff import RESTART, Backoff, fresh
from baton.core.errors import DatabaseUnavailableError
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec, SchedulerState
from baton.ingest.ownership import owner_prefix
from baton.ingest.registry import build_scheduler
from baton.ingest.scheduler import Scheduler, SchedulerContext
from baton.storage.control.scheduler_leases import Claim, mark_failed_unless_claimed
from baton.storage.engine import Store
from baton.storage.errors import DATABASE

log = get_logger("baton.runners")
STABLE_AFTER_SECONDS = 30.0


def standalone_args(spec: SchedulerSpec, runner_name: str, leader_term: int | None = None) -> list[str]:
    """`baton` arguments that run `spec` in stand-alone mode: what a child process or a pod runs.
    With `leader_term`, the scheduler claims its row only while that leadership term holds."""
    args = [
        "standalone",
        "--organisation",
        spec.organisation,
        "--scheduler",
        spec.type.value,
        "--runner-name",
        runner_name,
    ]
    return args if leader_term is None else [*args, "--leader-term", str(leader_term)]


class Runner(Protocol):
    name: str
    #: Its schedulers live and die with the director (threads, children): a new leader fences out
    #: whatever a previous term started. Pods outlive directors and are adopted instead.
    revokes_on_takeover: bool

    def start(self, spec: SchedulerSpec) -> None:
        """Start a scheduler; a no-op when it already runs (reconcile is idempotent)."""

    def start_many(self, specs: builtins.list[SchedulerSpec]) -> builtins.list[str]:
        """Start several (batched where the runner can); the ids actually started."""
        ...

    def follow_leader(self, term: int | None) -> None:
        """Schedulers started from now on claim their rows under this leadership term."""

    def stop(self, scheduler_id: str, timeout: float = 10.0) -> None:
        """Stop a scheduler gracefully, forcefully after `timeout`; forget it."""

    def restart(self, scheduler_id: str) -> None:
        """Stop and start again (e.g. its heartbeat went stale)."""

    def list(self) -> list[SchedulerSpec]:
        """The schedulers this runner manages, running or waiting to be restarted."""
        ...

    def status(self, scheduler_id: str) -> SchedulerState | None:
        """The runner's view of one scheduler; None when unknown."""
        ...

    def supervise(self) -> builtins.list[str]:
        """Restart dead schedulers whose backoff has passed; returns their ids."""
        ...

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every scheduler."""


Handle = TypeVar("Handle")


@dataclass(slots=True)
class Supervised(Generic[Handle]):
    spec: SchedulerSpec
    handle: Handle
    started_at: float = field(default_factory=time.monotonic)
    backoff: Backoff = field(default_factory=lambda: fresh(RESTART))
    restart_at: float | None = None


class SupervisingRunner(ABC, Generic[Handle]):
    """Bookkeeping shared by runners of local schedulers: idempotent start, restart with backoff."""

    name = "abstract"
    revokes_on_takeover = True

    def __init__(self, store: Store) -> None:
        self.store = store
        self.leader_term: int | None = None
        self._entries: dict[str, Supervised[Handle]] = {}
        self._lock = threading.RLock()

    def follow_leader(self, term: int | None) -> None:
        self.leader_term = term

    def start_many(self, specs: builtins.list[SchedulerSpec]) -> builtins.list[str]:
        for spec in specs:
            self.start(spec)
        return [spec.id for spec in specs]

    @abstractmethod
    def _owner_prefix(self, handle: Handle) -> str:
        """What the owner id of the claims `handle` makes starts with."""

    @abstractmethod
    def _launch(self, spec: SchedulerSpec) -> Handle: ...

    @abstractmethod
    def _alive(self, handle: Handle) -> bool: ...

    @abstractmethod
    def _terminate(self, handle: Handle, timeout: float) -> None: ...

    def start(self, spec: SchedulerSpec) -> None:
        with self._lock:
            if spec.id in self._entries:
                return
            self._entries[spec.id] = Supervised(spec, self._launch(spec))
            log.info("scheduler started", scheduler=spec.id, runner=self.name)

    def stop(self, scheduler_id: str, timeout: float = 10.0) -> None:
        with self._lock:
            entry = self._entries.pop(scheduler_id, None)
        if entry is not None:
            self._terminate(entry.handle, timeout)
            log.info("scheduler stopped", scheduler=scheduler_id, runner=self.name)

    def restart(self, scheduler_id: str) -> None:
        with self._lock:
            entry = self._entries.get(scheduler_id)
            if entry is None:
                return
            self._terminate(entry.handle, 10.0)
            entry.handle = self._launch(entry.spec)
            entry.started_at = time.monotonic()
            log.warning("scheduler restarted", scheduler=scheduler_id, runner=self.name)

    def list(self) -> list[SchedulerSpec]:
        with self._lock:
            return sorted(entry.spec for entry in self._entries.values())

    def status(self, scheduler_id: str) -> SchedulerState | None:
        with self._lock:
            entry = self._entries.get(scheduler_id)
            if entry is None:
                return None
            return SchedulerState.RUNNING if self._alive(entry.handle) else SchedulerState.FAILED

    def supervise(self) -> builtins.list[str]:
        restarted: list[str] = []
        now = time.monotonic()
        with self._lock:
            for scheduler_id, entry in self._entries.items():
                if self._alive(entry.handle):
                    if entry.backoff.failures_seen and now - entry.started_at > STABLE_AFTER_SECONDS:
                        entry.backoff.reset()
                    continue
                if entry.restart_at is None:
                    delay = entry.backoff.next()
                    entry.restart_at = now + delay
                    self._mark_failed(scheduler_id, self._owner_prefix(entry.handle))
                    # In a database outage, one that stopped with it is expected (the outage is logged).
                    say = log.warning if DATABASE.available else log.info
                    say("scheduler died; restarting after backoff", scheduler=scheduler_id, delay=delay)
                if now >= entry.restart_at:
                    entry.handle = self._launch(entry.spec)
                    entry.started_at = now
                    entry.restart_at = None
                    restarted.append(scheduler_id)
        return restarted

    def _mark_failed(self, scheduler_id: str, owner_prefix: str) -> None:
        """A dead scheduler cannot report itself: show it failed until it is back (only while no one
        else holds its row)."""
        try:
            with self.store.control_session() as session:
                mark_failed_unless_claimed(session, scheduler_id, owner_prefix)
        except DatabaseUnavailableError:
            pass  # logged once, as an outage; its row shows the heartbeat it stopped at
        except Exception:
            log.warning("could not mark scheduler failed", scheduler=scheduler_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            self._terminate(entry.handle, timeout)


@dataclass(slots=True)
class ThreadHandle:
    scheduler: Scheduler
    turns: Turns


class ThreadRunner(SupervisingRunner[ThreadHandle]):
    """Schedulers in this process (the embedded `baton serve`, a worker), taking turns on a few
    threads (control/tickpool.py, `BATON_SCHEDULER_THREADS`) rather than a thread each."""

    name = "thread"

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context.store)
        self.context = context
        self.pool = TickPool(context.settings.scheduler_threads)
        self._winding_down: builtins.list[ThreadHandle] = []  # told to stop, not waited for

    def launch_claimed(self, specs_and_claims: builtins.list[tuple[SchedulerSpec, Claim]]) -> builtins.list[str]:
        """Run schedulers whose rows were claimed already (a worker's share)."""
        started, dropped = [], []
        with self._lock:
            for spec, claim in specs_and_claims:
                if spec.id not in self._entries:
                    self._entries[spec.id] = Supervised(spec, self._launch(spec, claim))
                    started.append(spec.id)
                else:
                    dropped.append(claim)
        self.context.leases().abandon(dropped)
        return started

    def forget_dead(self) -> builtins.list[str]:
        """Drop schedulers that ended (stopped, failed or fenced) instead of restarting them: for a
        worker, whose rows any peer may claim again."""
        with self._lock:
            dead = [scheduler_id for scheduler_id, entry in self._entries.items() if not self._alive(entry.handle)]
            for scheduler_id in dead:
                del self._entries[scheduler_id]
            self._winding_down = [handle for handle in self._winding_down if self._alive(handle)]
        return dead

    def follow_leader(self, term: int | None) -> None:
        super().follow_leader(term)
        self.context.leases().leader_term = term

    def start_many(self, specs: builtins.list[SchedulerSpec]) -> builtins.list[str]:
        """One claim statement for all of them; what another owner still holds is left for a later
        round (reconcile retries it)."""
        with self._lock:
            wanted = [spec for spec in specs if spec.id not in self._entries]
        if not wanted:
            return []
        claims = self.context.leases().claim([spec.id for spec in wanted], runner=self.name)
        started, dropped = [], []
        with self._lock:
            for spec in wanted:
                claim = claims.get(spec.id)
                if claim is not None and spec.id not in self._entries:
                    self._entries[spec.id] = Supervised(spec, self._launch(spec, claim))
                    started.append(spec.id)
                elif claim is not None:
                    dropped.append(claim)
        self.context.leases().abandon(dropped)
        if started:
            log.info("schedulers started", count=len(started), runner=self.name)
        return started

    def _owner_prefix(self, handle: ThreadHandle) -> str:
        return self.context.leases().owner

    def _launch(self, spec: SchedulerSpec, claim: Claim | None = None) -> ThreadHandle:
        """Without `claim`, the scheduler claims its row in its first turns. Renewals start with the
        first scheduler (a no-op afterwards)."""
        self.context.leases().start_in_background()
        scheduler = build_scheduler(spec, self.context, claim)
        return ThreadHandle(scheduler, self.pool.file(scheduler))

    def _alive(self, handle: ThreadHandle) -> bool:
        return handle.turns.is_alive()

    def _terminate(self, handle: ThreadHandle, timeout: float) -> None:
        self._stop_together([handle], timeout)

    def ids(self) -> set[str]:
        """The ids of the schedulers it runs (unsorted: a worker asks every round, of thousands)."""
        with self._lock:
            return set(self._entries)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            handles = [entry.handle for entry in self._entries.values()] + self._winding_down
            self._entries.clear()
            self._winding_down = []
        self._stop_together(handles, timeout)
        self.pool.close(timeout)
        self.context.stop_wakeups()

    def stop_many(self, scheduler_ids: Iterable[str], timeout: float = 10.0, wait: bool = True) -> None:
        """Stop these schedulers; with `wait=False` only tell them (shutdown still waits for them)."""
        with self._lock:
            entries = [self._entries.pop(scheduler_id, None) for scheduler_id in scheduler_ids]
            handles = [entry.handle for entry in entries if entry is not None]
            if not wait:
                self._winding_down = [h for h in self._winding_down if self._alive(h)] + handles
        if wait:
            self._stop_together(handles, timeout)
        else:
            self.pool.stop(handle.turns for handle in handles)

    def _stop_together(self, handles: builtins.list[ThreadHandle], timeout: float) -> None:
        """Tell every scheduler to stop (their turns come at once), then wait for them: they give
        their rows up in parallel, not one after another (a SIGTERM hand-over must be quick)."""
        self.pool.stop(handle.turns for handle in handles)
        deadline = time.monotonic() + timeout
        for handle in handles:
            handle.turns.join(max(0.0, deadline - time.monotonic()))
            if handle.turns.is_alive():
                log.warning("scheduler did not stop in time", scheduler=handle.scheduler.id)


class ProcessRunner(SupervisingRunner[Child]):
    """Schedulers as child processes, each running `baton standalone` (what a pod would run): forked
    from a fork server that has imported what they run (control/forking.py), or a fresh interpreter
    each with `fork_server=False` (or where the kernel has no pidfds)."""

    name = "process"

    def __init__(
        self, store: Store, database_url: str, extra_env: dict[str, str] | None = None, fork_server: bool = True
    ) -> None:
        super().__init__(store)
        self.database_url = database_url
        self.extra_env = extra_env or {}
        self.fork_server = ForkServer(self.environment) if fork_server and fork_server_supported() else None
        if self.fork_server is not None:
            self.fork_server.start()  # it imports while a standby waits to lead, not when it must fork

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env, "BATON_DATABASE_URL": self.database_url}

    def command(self, spec: SchedulerSpec) -> list[str]:
        """What a child runs: this command line, or, forked, the same arguments in-process."""
        return [sys.executable, "-m", "baton", *standalone_args(spec, self.name, self.leader_term)]

    def _owner_prefix(self, handle: Child) -> str:
        return owner_prefix(handle.pid)

    def _launch(self, spec: SchedulerSpec) -> Child:
        if self.fork_server is None:
            return ExecutedChild(self.command(spec), self.environment())
        return self.fork_server.fork(standalone_args(spec, self.name, self.leader_term))

    def _alive(self, handle: Child) -> bool:
        return handle.alive()

    def _terminate(self, handle: Child, timeout: float) -> None:
        stop_children([handle], timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every child at once, then the fork server (started again by the next launch)."""
        with self._lock:
            children = [entry.handle for entry in self._entries.values()]
            self._entries.clear()
        stop_children(children, timeout)
        if self.fork_server is not None:
            self.fork_server.close()

    def pid(self, scheduler_id: str) -> int | None:
        with self._lock:
            entry = self._entries.get(scheduler_id)
            return entry.handle.pid if entry is not None else None
