"""A worker's schedulers, taking turns on a few threads.

A worker holds its fair share of every scheduler, a thousand or more. As one thread each, a
hand-over meant starting 1,500 threads on two cores the leaving worker's 1,500 were also winding
down on: 6-35 s before all ran. Here a scheduler is an entry in a timetable: `launch_claimed` only
files it (microseconds), and a handful of threads run whichever scheduler's turn is due next: its
`begin`, then one `step` at a time, each telling when its next turn is, then its `end`. The
scheduler code is the one a thread or a process runs (`Scheduler.run` is the same four calls).

A stopped scheduler's turn is brought forward, so its row is given up at once; a scheduler that
fails or is fenced ends and is dropped by `forget_dead` (a worker's rows go back to the pool).
Turns never overlap for one scheduler: an entry is in the timetable or being run, never both.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec
from baton.ingest.schedulers import Scheduler, SchedulerContext, build_scheduler
from baton.storage.leases import Claim

log = get_logger("baton.tickpool")


@dataclass(eq=False)
class _Entry:
    scheduler: Scheduler
    begun: bool = False
    turn: int = 0  # the timetable slot that is current; older slots of this entry are skipped
    running: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


class TickPool:
    """Runs claimed schedulers on `threads` threads; the interface a worker needs of a runner."""

    name = "worker"

    def __init__(self, context: SchedulerContext, threads: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.context = context
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._winding_down: builtins.list[_Entry] = []  # told to stop, not ended yet
        self._timetable: builtins.list[tuple[float, int, int, _Entry]] = []  # (due, order, turn, entry)
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closing = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"tickpool-{n}", daemon=True) for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    # -- what a worker calls ------------------------------------------------------------------------

    def launch_claimed(self, specs_and_claims: builtins.list[tuple[SchedulerSpec, Claim]]) -> builtins.list[str]:
        """File schedulers whose rows were claimed already; their first turns come at once."""
        started = []
        with self._cond:
            for spec, claim in specs_and_claims:
                if spec.id in self._entries:
                    continue
                scheduler = build_scheduler(spec, self.context, claim)
                scheduler.take(claim)
                entry = _Entry(scheduler)
                self._entries[spec.id] = entry
                self._file(entry, self._clock())
                started.append(spec.id)
            self._cond.notify_all()
        return started

    def list(self) -> builtins.list[SchedulerSpec]:
        with self._cond:
            return [entry.scheduler.spec for entry in self._entries.values()]

    def forget_dead(self) -> builtins.list[str]:
        """Drop schedulers that ended on their own (failed, fenced): any worker may claim them again."""
        with self._cond:
            dead = [sid for sid, entry in self._entries.items() if entry.ended.is_set()]
            for scheduler_id in dead:
                del self._entries[scheduler_id]
            self._winding_down = [entry for entry in self._winding_down if not entry.ended.is_set()]
        return dead

    def stop_many(self, scheduler_ids: Iterable[str], timeout: float = 10.0, wait: bool = True) -> None:
        """Stop these schedulers (their turns come at once); with `wait=False` only tell them."""
        with self._cond:
            entries = [entry for entry in (self._entries.pop(sid, None) for sid in scheduler_ids) if entry]
            self._winding_down.extend(entries)
            self._stop_entries(entries)
        if wait:
            self._wait_ended(entries, timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every scheduler, wait for them to give their rows up, then stop the threads."""
        with self._cond:
            entries = [*self._entries.values(), *self._winding_down]
            self._entries.clear()
            self._winding_down = []
            self._stop_entries(entries)
        self._wait_ended(entries, timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = self._clock() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - self._clock()))

    # -- the timetable ------------------------------------------------------------------------------

    def _file(self, entry: _Entry, due: float) -> None:
        """Under the lock: `entry`'s next turn is at `due` (any earlier slot of it is void)."""
        entry.turn += 1
        heapq.heappush(self._timetable, (due, next(self._order), entry.turn, entry))

    def _stop_entries(self, entries: builtins.list[_Entry]) -> None:
        """Under the lock: tell them, and bring the turns of those waiting forward to now."""
        now = self._clock()
        for entry in entries:
            entry.scheduler.stop()
            if not entry.running and not entry.ended.is_set():
                self._file(entry, now)
        self._cond.notify_all()

    def _wait_ended(self, entries: builtins.list[_Entry], timeout: float) -> None:
        deadline = self._clock() + timeout
        for entry in entries:
            if not entry.ended.wait(max(0.0, deadline - self._clock())):
                log.warning("scheduler did not stop in time", scheduler=entry.scheduler.id)

    def _next_due(self) -> _Entry | None:
        """Block until some entry's turn is due; None once the pool closes."""
        with self._cond:
            while not self._closing:
                if not self._timetable:
                    self._cond.wait()
                    continue
                due, _, turn, entry = self._timetable[0]
                if turn != entry.turn or entry.ended.is_set():
                    heapq.heappop(self._timetable)  # a void slot
                    continue
                wait = due - self._clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._timetable)
                entry.running = True
                return entry
            return None

    def _serve(self) -> None:
        while (entry := self._next_due()) is not None:
            pause = self._take_turn(entry)
            with self._cond:
                ending = pause is None or entry.scheduler.stopping
                if pause is not None and not ending:  # an ending entry stays `running`: nobody files it
                    entry.running = False
                    self._file(entry, self._clock() + pause)
                    self._cond.notify()
            if ending:
                self._end(entry)

    @staticmethod
    def _take_turn(entry: _Entry) -> float | None:
        """Run one turn; the pause before the next, or None when the scheduler is done."""
        scheduler = entry.scheduler
        if scheduler.stopping:
            return None
        try:
            if not entry.begun:
                entry.begun = True
                scheduler.begin()
                return scheduler.first_tick_delay()
            return scheduler.step()
        except Exception:
            scheduler.failed()
            return None

    @staticmethod
    def _end(entry: _Entry) -> None:
        try:
            entry.scheduler.end()
        except Exception:
            log.exception("scheduler did not end cleanly", scheduler=entry.scheduler.id)
        finally:
            entry.ended.set()
