"""An outage, as one process sees it: the database or an outside service (KATalogus, Octopoes,
Bytes) stops answering, then answers again. Logged once when it starts (a warning, with the reason)
and once when it ends (an info line, with how long it lasted), counted for /metrics, kept as the
`current` outage (since when, why) for /ready and the status page, and announced to whoever waits
for it to end (a scheduler backing off, the director between rounds, the event router).

Every caller reports what its own attempt did (`failed`, `succeeded`), and none logs the outage
itself: a process with a thousand schedulers, its lease renewals, its director and its event
router writes two lines per outage, not one per attempt.

Attempts overlap, so a report is judged against what happened since its attempt began: each
attempt reads `mark` when it begins (an attribute read) and hands it back with its outcome.
- A failure opens an outage only if nothing succeeded since its attempt began: an attempt that
  waited for a pooled connection while others were served (an overloaded pool, SQLite's write lock
  held), or one that began before the last outage ended, is late news, not an outage.
- A success ends an outage only if its attempt began after the outage was declared: an attempt
  that began before may have committed before the failure that declared it.
A caller that reports an outcome as of its report (`mark` read then, as the HTTP clients do: their
calls already retried for seconds before they report) gets the plain rule: any failure while up
opens an outage, any success while down ends it.
The hot path pays an attribute read and an increment per attempt, and takes the lock only when
the state changes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from baton.core.logging import get_logger

Listener = Callable[[], None]


class OutageLog(Protocol):
    def warning(self, event: str, **fields: Any) -> Any: ...

    def info(self, event: str, **fields: Any) -> Any: ...


@dataclass(frozen=True)
class Outage:
    """The current outage of one service: since when (wall-clock epoch seconds) and why."""

    service: str
    since: float
    reason: str


@dataclass(frozen=True)
class Wording:
    """The two lines an outage is logged with, and the field that says how long it lasted (the names
    operators' log searches and alerts already use)."""

    down: str
    up: str
    lasted: str
    digits: int = 2


def database_wording(what: str) -> Wording:
    return Wording(f"{what} unavailable", f"{what} available again", "after_seconds", 2)


SERVICE_WORDING = Wording("outside service failing", "outside service answering again", "outage_seconds", 1)


class OutageTracker:
    """Up → down (one warning, with the reason) → up (one info line, with the duration)."""

    def __init__(
        self,
        what: str,
        log: OutageLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        wording: Wording | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.what = what
        self.wording = wording or database_wording(what)
        self.available = True  # read without the lock, on every attempt's way out
        self.mark = 0  # moves on with every success and every change of state
        self.outages = 0  # outages begun, since the process started
        self.reason: str | None = None  # why the current (or last) outage began
        self._down_mark = 0  # `mark` when the current outage was declared
        self._since: float | None = None  # when the current outage began (clock)
        self._current: Outage | None = None
        self._clock = clock
        self._wall_clock = wall_clock
        self._log = log or get_logger(f"baton.{what}")
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._recovered = threading.Condition(self._lock)

    # -- what the attempts report ----------------------------------------------------------------

    def failed(self, seen: int, reason: str) -> bool:
        """An attempt that began at `seen` found the service unavailable; True if that opened an outage."""
        if not self.available or seen != self.mark:
            return False
        with self._lock:
            if not self.available or seen != self.mark:
                return False
            self.available = False
            self.outages += 1
            self.reason = reason
            self._since = self._clock()
            self._current = Outage(self.what, self._wall_clock(), reason)
            self.mark += 1
            self._down_mark = self.mark
        self._log.warning(self.wording.down, reason=reason, outage=self.outages)
        return True

    def succeeded(self, seen: int) -> bool:
        """An attempt that began at `seen` was answered; True if that ended an outage."""
        self.mark += 1
        if self.available:
            return False
        with self._lock:
            if self.available or seen < self._down_mark:
                return False
            self.available = True
            self.mark += 1
            lasted = self._clock() - (self._since or self._clock())
            self._since = None
            self._current = None
            listeners = list(self._listeners)
            self._recovered.notify_all()
        self._log.info(
            self.wording.up, **{self.wording.lasted: round(lasted, self.wording.digits)}, outage=self.outages
        )
        for listener in listeners:
            listener()
        return True

    # -- what the others ask ----------------------------------------------------------------------

    @property
    def current(self) -> Outage | None:
        """The outage going on now (None: available)."""
        return self._current

    def unavailable_for(self) -> float:
        """Seconds since the current outage began; 0 while available."""
        since = self._since
        return 0.0 if since is None or self.available else max(0.0, self._clock() - since)

    def wait_until_available(self, timeout: float) -> bool:
        """Block until the outage ends, at most `timeout` seconds; True if available."""
        with self._recovered:
            return self._recovered.wait_for(lambda: self.available, timeout)

    def on_recovery(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` (cheap, non-blocking: set an event) each time an outage ends; returns the
        function that stops that."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove


def service_outages(service: str, url: str) -> OutageTracker:
    """The tracker of an outside service's client: its lines name the service and its URL."""
    log = get_logger("openkat").bind(service=service, url=url)
    return OutageTracker(service, log, wording=SERVICE_WORDING)
