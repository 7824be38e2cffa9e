"""Background threads with one shape: start, stop, and retry with one backoff policy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from baton.core.backoff import Backoff
from baton.core.logging import get_logger

log = get_logger("baton.control")


def retry_until_stopped(
    stop: threading.Event,
    attempt: Callable[[], None],
    backoff: Backoff,
    errors: tuple[type[BaseException], ...],
    what: str | None,
) -> None:
    """Run `attempt` until `stop` is set; after each failure in `errors` wait the backoff's next delay.

    `attempt` returning normally resets the backoff (it ran until it was told to stop or its work
    ended), and so does one that ran longer than the backoff's longest delay before it failed (it
    was connected: this failure begins a new outage). An outage is logged once, at its first
    failure, not at every attempt, as `what`; with `what` None not at all (the attempt reports its
    failures to the process's outage tracker, which logs the outage once for the whole process).
    Any other exception propagates: it is a bug, not weather.
    """
    while not stop.is_set():
        started = time.monotonic()
        try:
            attempt()
            backoff.reset()
        except errors as exc:
            if time.monotonic() - started > backoff.maximum:
                backoff.reset()
            if not backoff.failures_seen and what is not None:
                log.warning(f"{what}; retrying", error=repr(exc))
            stop.wait(backoff.next())


class BackgroundService:
    """A thread that runs `run()` until `stop()`; `stop()` waits for it, then `stopped()` cleans up."""

    thread_name = "background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        raise NotImplementedError

    def start_in_background(self) -> None:
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.stopped(timeout)

    def stopped(self, timeout: float) -> None:
        """Hook: release what the service holds, after its thread ended."""
        return None
