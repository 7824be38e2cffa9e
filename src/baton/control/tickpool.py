"""Schedulers taking turns on a few threads: how the thread runner (a director's, a worker's) runs
them.

A worker holds its fair share of every scheduler, a thousand or more; a director's thread runner all
of them. As one thread each, a hand-over meant starting 1,500 threads on two cores that the leaving
worker's 1,500 were also winding down on (6-35 s before all ran), and a director's 3,000 threads
took anywhere from 1 to 56 s to take their first turns. Here a scheduler is an entry in a
timetable: `file` costs microseconds, and a handful of threads run whichever scheduler's turn is due
next: its claim (retried every retry period while another owner holds the row), its `begin`, then
one `step` at a time, each saying when its next turn is, then its `end`. The scheduler code is the
one a process runs (`Scheduler.run` makes the same calls in a loop of its own).

A stopped scheduler's turn is brought forward, so its row is given up at once, and so is a woken
one's (input waits for it: ingest/wakeups.py); woken during its turn, its next comes right after.
Turns of one scheduler never overlap: an entry is in the timetable or being run, never both.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from baton.core.logging import get_logger
from baton.ingest.scheduler import Scheduler

log = get_logger("baton.tickpool")


@dataclass(eq=False, slots=True)
class Turns:
    """One scheduler in the timetable; alive until its `end` ran. Small: a worker files thousands
    (one condition of the pool's tells those who join them, not an event each)."""

    scheduler: Scheduler
    pool: TickPool
    taken: bool = False
    begun: bool = False
    turn: int = 0  # the timetable slot that is current; older slots of this entry are skipped
    due: float = 0.0  # when the current slot is due
    running: bool = False
    ended: bool = False

    def is_alive(self) -> bool:
        return not self.ended

    def join(self, timeout: float | None = None) -> None:
        with self.pool.endings:
            self.pool.endings.wait_for(lambda: self.ended, timeout)

    def wake(self) -> None:
        self.pool.wake(self)


class TickPool:
    """Runs schedulers' turns on `threads` threads, started with the first scheduler filed."""

    def __init__(self, threads: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = threads
        self._clock = clock
        self._timetable: builtins.list[tuple[float, int, int, Turns]] = []  # (due, order, turn, entry)
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._threads: builtins.list[threading.Thread] = []
        self._closing = False
        self._void = 0  # slots in the timetable that a later one of the same entry replaced
        self.endings = threading.Condition()  # notified when an entry ends

    def file(self, scheduler: Scheduler) -> Turns:
        """Add a scheduler (claimed already, or to claim in its first turn); its first turn is now.
        A claimed one is held at once: its row is renewed from this moment, never left unheld."""
        entry = Turns(scheduler, self)
        scheduler.waker = entry.wake
        if scheduler.claim is not None:
            scheduler.take(scheduler.claim)
            entry.taken = True
        with self._cond:
            self._start_threads()
            self._file(entry, self._clock())
            self._cond.notify()
        return entry

    def stop(self, entries: Iterable[Turns]) -> None:
        """Tell these schedulers to stop, and bring the turns of those waiting forward to now."""
        now = self._clock()
        with self._cond:
            for entry in entries:
                entry.scheduler.stop()
                if not entry.running and entry.is_alive():
                    self._file(entry, now)
            self._cond.notify_all()

    def wake(self, entry: Turns) -> None:
        """Bring a waiting entry's turn forward to now (one being run is filed again by its turn's
        end, at once when its scheduler was woken meanwhile)."""
        with self._cond:
            now = self._clock()
            if entry.running or not entry.is_alive() or entry.due <= now:
                return
            self._file(entry, now)
            self._cond.notify()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the threads, each after the turn it is running (filing again starts them anew); the
        caller stops its schedulers first."""
        with self._cond:
            threads, self._threads = self._threads, []
            self._closing = True
            self._cond.notify_all()
        deadline = self._clock() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - self._clock()))

    # -- the timetable ------------------------------------------------------------------------------

    def _start_threads(self) -> None:
        """Under the lock."""
        if self._threads:
            return
        self._closing = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"tickpool-{n}", daemon=True) for n in range(self.size)
        ]
        for thread in self._threads:
            thread.start()

    def _file(self, entry: Turns, due: float) -> None:
        """Under the lock: `entry`'s next turn is at `due` (any earlier slot of it is void)."""
        if entry.turn and not entry.running:
            self._void += 1  # its slot still in the timetable is replaced
        entry.turn += 1
        entry.due = due
        heapq.heappush(self._timetable, (due, next(self._order), entry.turn, entry))
        if self._void > max(1000, len(self._timetable) // 2):
            self._compact()

    def _compact(self) -> None:
        """Under the lock: drop the void slots (an idle scheduler's slot is an hour away: woken often,
        it would leave a void slot behind each time)."""
        self._timetable = [slot for slot in self._timetable if slot[2] == slot[3].turn and slot[3].is_alive()]
        heapq.heapify(self._timetable)
        self._void = 0

    def _next_due(self) -> Turns | None:
        """Block until some entry's turn is due; None once the pool closes."""
        with self._cond:
            while not self._closing:
                if not self._timetable:
                    self._cond.wait()
                    continue
                due, _, turn, entry = self._timetable[0]
                if turn != entry.turn or not entry.is_alive():
                    heapq.heappop(self._timetable)  # a void slot
                    self._void = max(0, self._void - 1)
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
                    self._file(entry, self._clock() + pause)
                    entry.running = False
                    self._cond.notify()
            if ending:
                self._end(entry)

    @staticmethod
    def _take_turn(entry: Turns) -> float | None:
        """Run one turn; the pause before the next, or None when the scheduler is done."""
        scheduler = entry.scheduler
        if scheduler.stopping:
            return None
        try:
            if not entry.taken:
                claim = scheduler.try_claim()
                if claim is None:  # held elsewhere until its lease ends (or its organisation is gone)
                    return scheduler.settings.leases.retry_period_seconds
                scheduler.take(claim)
                entry.taken = True
            if not entry.begun:
                entry.begun = True
                scheduler.begin()
                return scheduler.first_tick_delay()
            return scheduler.step()
        except Exception:
            scheduler.failed()
            return None

    @staticmethod
    def _end(entry: Turns) -> None:
        try:
            if entry.taken:
                entry.scheduler.end()
        except Exception:
            log.exception("scheduler did not end cleanly", scheduler=entry.scheduler.id)
        finally:
            with entry.pool.endings:
                entry.ended = True
                entry.pool.endings.notify_all()
