"""Schedulers' inputs, as the processes that run them learn of them: events waiting in an inbox and
schedules due now.

- `schedulers_with_input`: one statement a process sends every poll interval on behalf of all its
  schedulers (instead of each asking for itself), which finds every scheduler with an unconsumed
  event (a skip scan of the pending events' index: one index descent per such scheduler, however
  deep its inbox) or a schedule due now (the index of enabled deadlines). Both backends.
- `InputListener` (PostgreSQL): one LISTEN connection per process on the channel the triggers of
  migration 0010 notify at commit, whoever wrote the input (the API, the OpenKAT event router,
  another process); each notification names one scheduler. It reconnects with the one backoff
  policy; an outage is logged when it starts and when it ends, and after a reconnect `on_gap` says
  that notifications may have been missed meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import literal, select, text
from sqlalchemy.orm import Session

from baton.core.backoff import RECONNECT, fresh
from baton.core.logging import get_logger
from baton.storage.engine import connection_name
from baton.storage.errors import DATABASE, unavailable
from baton.storage.tables import Schedule
from baton.storage.urls import libpq_conninfo

log = get_logger("baton.storage.scheduling.inputs")

INPUTS_CHANNEL = "baton_inputs"  # migration 0010's triggers notify it
# The listening connection is asked something this often: a connection a silent network cut off
# would otherwise wait for notifications forever.
CHECK_SECONDS = 10.0
STOP_CHECK_SECONDS = 1.0  # how soon a stop is noticed while waiting for notifications
CONNECT_TIMEOUT_SECONDS = 10

# Distinct scheduler ids among unconsumed events, found one index descent at a time (a "loose index
# scan"): with a backlog it costs one descent per scheduler that has events, not one row per event.
_PENDING_SCHEDULERS = text(
    """
    WITH RECURSIVE pending(scheduler_id) AS (
        SELECT min(scheduler_id) FROM events WHERE consumed_at IS NULL
      UNION ALL
        SELECT (SELECT min(later.scheduler_id) FROM events AS later
                WHERE later.consumed_at IS NULL AND later.scheduler_id > pending.scheduler_id)
        FROM pending WHERE pending.scheduler_id IS NOT NULL
    )
    SELECT scheduler_id FROM pending WHERE scheduler_id IS NOT NULL
    """
)


def schedulers_with_input(session: Session, now: datetime, events: bool = True) -> set[str]:
    """Every scheduler with a schedule due at `now` and, with `events`, with an unconsumed event."""
    found: set[str] = set(session.scalars(_PENDING_SCHEDULERS)) if events else set()
    scheduler_id = Schedule.scheduler_id + literal("-") + Schedule.organisation  # `scheduler_id` holds the type
    due = select(scheduler_id).where(Schedule.enabled, Schedule.deadline_at <= now).distinct()
    found.update(session.scalars(due))
    return found


class InputListener:
    """LISTEN for inputs on one connection, on a thread of its own: `on_input(scheduler_id)` for each
    notification, `on_gap()` after every (re)connect."""

    def __init__(self, conninfo: str, on_input: Callable[[str], None], on_gap: Callable[[], None]) -> None:
        self._conninfo = libpq_conninfo(conninfo)  # the store's (`store.address.conninfo`), or a URL
        self._on_input = on_input
        self._on_gap = on_gap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = False

    @property
    def live(self) -> bool:
        """True while every new input is announced."""
        return self._live

    def start(self) -> None:
        if self._thread is None:
            self._stop = threading.Event()  # each thread its own: one halted may still be ending
            self._thread = threading.Thread(target=self._run, args=(self._stop,), name="input-listener", daemon=True)
            self._thread.start()

    def halt(self) -> None:
        """Tell the thread to end (within STOP_CHECK_SECONDS), without waiting for it."""
        self._stop.set()
        self._thread = None
        self._live = False

    def stop(self, timeout: float = 5.0) -> None:
        thread = self._thread
        self.halt()
        if thread is not None:
            thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        backoff = fresh(RECONNECT)
        while not stop.is_set():
            seen = DATABASE.mark
            try:
                self._listen(stop, backoff.failures_seen, seen)
                backoff.reset()
            except Exception as exc:  # whatever it was, this thread must not die: wake-ups rely on it
                outage = unavailable(exc)
                if outage is not None:
                    DATABASE.failed(seen, outage.reason)  # logged once per process, by the tracker
                elif self._live or not backoff.failures_seen:
                    log.warning("cannot listen for scheduler inputs; looking every poll interval", error=str(exc))
                self._live = False
                stop.wait(backoff.next())

    def _listen(self, stop: threading.Event, after_failure: bool, seen: int) -> None:
        conn = psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=connection_name(),
        )
        with conn:
            conn.execute(f"LISTEN {INPUTS_CHANNEL}")
            DATABASE.succeeded(seen)
            if stop.is_set():
                return
            self._live = True
            if after_failure:
                log.debug("listening for scheduler inputs again")
            self._on_gap()  # inputs that arrived while nobody listened
            self._relay(conn, stop)

    def _relay(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        checked = 0.0
        while not stop.is_set():
            for notification in conn.notifies(timeout=STOP_CHECK_SECONDS):
                self._on_input(notification.payload)
            checked += STOP_CHECK_SECONDS
            if checked >= CHECK_SECONDS:
                checked = 0.0
                conn.execute("SELECT 1")
