"""Waking the schedulers of one process when input waits for them, so an idle one costs nothing.

An idle scheduler does not look for work itself: it waits until it is woken. Its process does the
looking for all of them at once:

- on PostgreSQL, notifications name the scheduler whose inbox got an event or whose schedule became
  due (storage/scheduling/inputs.py, one LISTEN connection per process): it is woken at once;
- every poll interval, one statement finds every scheduler with a due schedule (deadlines come
  without anyone writing) and, while notifications are not heard (SQLite; PostgreSQL during an
  outage), every scheduler with an unconsumed event; while they are heard, events are looked for only
  every EVENT_LOOK_EVERY intervals: the safety net for a notification lost, at the cost of latency.

A scheduler registers with its wake-up (`register`) when it begins and unregisters when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from baton.core.errors import DatabaseUnavailableError
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.storage.engine import Store
from baton.storage.scheduling.inputs import InputListener, schedulers_with_input

log = get_logger("baton.wakeups")

# While notifications are heard, pending events are looked for every this many poll intervals.
EVENT_LOOK_EVERY = 10

Wake = Callable[[], None]


class InputWakeups:
    """The wake-ups of one process's schedulers (shared by them: `SchedulerContext.wakeups()`)."""

    def __init__(self, store: Store, interval: float) -> None:
        self.store = store
        self.interval = interval
        self._registered: dict[str, Wake] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()  # the running look thread's; a new one each start
        self._look_now = threading.Event()
        self._thread: threading.Thread | None = None
        conninfo = store.address.conninfo
        self._listener = InputListener(conninfo, self.wake, self._look_soon) if store.is_postgresql else None
        self._failing = False
        self.looks = 0

    def register(self, scheduler_id: str, wake: Wake) -> None:
        """From now on `wake` is called when input waits for the scheduler; the next look (soon)
        finds what arrived before. The first registration starts the looking and listening."""
        with self._lock:
            self._registered[scheduler_id] = wake
            self._start()
        self._look_now.set()

    def unregister(self, scheduler_id: str, wake: Wake) -> None:
        """Only the registration of this very wake-up (a scheduler started again may have its own).
        The last one stops the looking and listening: a process that runs no scheduler (a director
        that stepped down) costs nothing either."""
        with self._lock:
            if self._registered.get(scheduler_id) == wake:
                del self._registered[scheduler_id]
                if not self._registered:
                    self._halt()

    def registered(self) -> set[str]:
        with self._lock:
            return set(self._registered)

    def wake(self, scheduler_id: str) -> None:
        with self._lock:
            wake = self._registered.get(scheduler_id)
        if wake is not None:
            wake()

    @property
    def listening(self) -> bool:
        return self._listener is not None and self._listener.live

    def _start(self) -> None:
        """Under the lock."""
        if self._thread is not None:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name="input-wakeups", daemon=True)
        self._thread.start()
        if self._listener is not None:
            self._listener.start()

    def _halt(self) -> None:
        """Under the lock: tell the threads to end, without waiting for them."""
        self._stop.set()
        self._look_now.set()
        if self._listener is not None:
            self._listener.halt()
        self._thread = None

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            thread = self._thread
            self._halt()
        if self._listener is not None:
            self._listener.stop(timeout)
        if thread is not None:
            thread.join(timeout)

    def _look_soon(self) -> None:
        """Notifications may have been missed (a reconnect): look for every input now."""
        self._look_now.set()

    def _run(self, stop: threading.Event) -> None:
        rounds = 0
        while not stop.is_set():
            forced = self._look_now.wait(self.interval)
            if stop.is_set():
                return
            self._look_now.clear()
            events = forced or not self.listening or rounds % EVENT_LOOK_EVERY == 0
            rounds += 1
            self.look(events)

    def look(self, events: bool = True) -> int:
        """Wake every scheduler of this process that has input waiting; how many were woken."""
        try:
            with self.store.session() as session:
                found = schedulers_with_input(session, utcnow(), events)
        except DatabaseUnavailableError:
            return 0  # an outage, logged once by the process's tracker: schedulers wait, the next look retries
        except Exception as exc:  # not an outage: said once, until a look succeeds again
            if not self._failing:
                log.warning("cannot look for scheduler inputs; retrying every poll interval", error=str(exc))
                self._failing = True
            return 0
        if self._failing:
            log.info("looking for scheduler inputs again")
            self._failing = False
        self.looks += 1
        with self._lock:
            wakes = [wake for scheduler_id in found if (wake := self._registered.get(scheduler_id)) is not None]
        for wake in wakes:
            wake()
        return len(wakes)
