"""The outage tracker's state machine (core/outages.py), without a database: attempts report what
they met, with the mark they read when they began."""

from __future__ import annotations

import threading
from typing import Any

from baton.core.outages import OutageTracker


class RecordedLog:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tracker() -> tuple[OutageTracker, RecordedLog, Clock]:
    log, clock = RecordedLog(), Clock()
    return OutageTracker("database", log=log, clock=clock), log, clock


def test_an_outage_is_one_warning_with_the_reason_and_one_line_with_its_duration() -> None:
    outages, log, clock = tracker()
    assert outages.failed(outages.mark, "connection refused")
    clock.now += 3.5
    for _ in range(50):  # every later attempt meets the same outage: nothing more is said
        assert not outages.failed(outages.mark, "connection refused")
    assert not outages.available
    assert outages.unavailable_for() == 3.5
    assert outages.succeeded(outages.mark)
    assert outages.available
    assert not outages.succeeded(outages.mark)
    assert log.lines == [
        ("warning", "database unavailable", {"reason": "connection refused", "outage": 1}),
        ("info", "database available again", {"after_seconds": 3.5, "outage": 1}),
    ]
    assert outages.outages == 1
    assert outages.unavailable_for() == 0.0


def test_every_outage_is_counted() -> None:
    outages, log, _ = tracker()
    for _ in range(3):
        outages.failed(outages.mark, "timed out")
        outages.succeeded(outages.mark)
    assert outages.outages == 3
    assert [level for level, _, _ in log.lines] == ["warning", "info"] * 3


def test_a_failure_of_an_attempt_older_than_a_success_is_no_outage() -> None:
    """An attempt that waited (for a pooled connection, for SQLite's lock) while others were served."""
    outages, log, _ = tracker()
    waited = outages.mark
    outages.succeeded(outages.mark)
    assert not outages.failed(waited, "timed out")
    assert outages.available and not log.lines


def test_a_failure_that_began_before_the_last_outage_ended_does_not_open_another() -> None:
    outages, log, _ = tracker()
    outages.failed(outages.mark, "connection refused")
    during = outages.mark  # an attempt begun during the outage, failing late
    outages.succeeded(outages.mark)
    assert not outages.failed(during, "connection refused")
    assert outages.available and outages.outages == 1
    assert [level for level, _, _ in log.lines] == ["warning", "info"]


def test_a_success_of_an_attempt_begun_before_the_outage_does_not_end_it() -> None:
    outages, log, _ = tracker()
    early = outages.mark
    outages.failed(outages.mark, "connection lost")
    assert not outages.succeeded(early)  # it may have committed before the failure
    assert not outages.available
    assert [level for level, _, _ in log.lines] == ["warning"]
    assert outages.succeeded(outages.mark)


def test_the_first_failure_after_the_last_success_opens_the_outage() -> None:
    """In flight when the database went away: those begun before the last success say nothing; the
    first attempt begun after it does."""
    outages, log, _ = tracker()
    in_flight = [outages.mark for _ in range(3)]
    outages.succeeded(outages.mark)
    assert not any(outages.failed(seen, "connection lost") for seen in in_flight)
    assert outages.failed(outages.mark, "connection refused")
    assert log.lines[0][2]["reason"] == "connection refused"


def test_listeners_hear_every_recovery_until_removed() -> None:
    outages, _, _ = tracker()
    heard: list[str] = []
    remove = outages.on_recovery(lambda: heard.append("back"))
    outages.failed(outages.mark, "x")
    outages.succeeded(outages.mark)
    remove()
    outages.failed(outages.mark, "x")
    outages.succeeded(outages.mark)
    assert heard == ["back"]


def test_a_waiter_is_released_by_the_recovery() -> None:
    outages, _, _ = tracker()
    assert outages.wait_until_available(0)  # available: no wait
    outages.failed(outages.mark, "x")
    assert not outages.wait_until_available(0)
    released = threading.Event()

    def wait() -> None:
        if outages.wait_until_available(60):
            released.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    outages.succeeded(outages.mark)
    waiter.join(60)
    assert released.is_set()


def test_concurrent_reports_give_one_warning_and_one_recovery() -> None:
    outages, log, _ = tracker()
    start = threading.Barrier(8)
    seen = outages.mark

    def fail() -> None:
        start.wait()
        for _ in range(200):
            outages.failed(seen, "connection refused")

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    back = outages.mark
    threads = [threading.Thread(target=outages.succeeded, args=(back,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [level for level, _, _ in log.lines] == ["warning", "info"]
