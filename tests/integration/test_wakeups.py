"""Idle schedulers wait until they are woken (ingest/wakeups.py): by a notification naming them
(PostgreSQL, whoever wrote the input), or by their process's look every poll interval, which is
the safety net for a notification lost and SQLite's way."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Json
from sqlalchemy.orm import Session

from baton.control.runners import ThreadRunner
from baton.core.model import SchedulerSpec, SchedulerType, TaskStatus, utcnow
from baton.ingest.events import DatabaseInbox, Delivery
from baton.ingest.scheduler import Scheduler, SchedulerContext
from baton.storage.engine import Store
from baton.storage.scheduling.inbox import enqueue_event
from baton.storage.scheduling.schedules import create_schedule
from baton.storage.tables import Event, Task
from baton.storage.urls import libpq_conninfo
from harness.factories import add_organisation, fast_settings
from harness.waiting import wait_until

ORGANISATIONS = ["acme", "beta", "gamma"]
RAW_FILE = {"type": "raw_file_received", "raw_file": {"id": "raw-1", "mime_types": ["text/html"]}}


class CountingInbox(DatabaseInbox):
    """The database inbox, counting each scheduler's looks into it (one per turn)."""

    def __init__(self, scheduler_id: str, looks: Counter[str]) -> None:
        super().__init__(scheduler_id)
        self.looks = looks

    def receive(self, session: Session, limit: int) -> Sequence[Delivery]:
        self.looks[self.scheduler_id] += 1
        return super().receive(session, limit)


@contextmanager
def running(store: Store, poll_interval: float) -> Iterator[tuple[ThreadRunner, Counter[str]]]:
    """Every scheduler of ORGANISATIONS on a thread runner, as a worker runs them; started and idle."""
    for organisation in ORGANISATIONS:
        add_organisation(store, organisation)
    looks: Counter[str] = Counter()

    def source(spec: SchedulerSpec) -> CountingInbox | None:
        return None if spec.type is SchedulerType.REPORT else CountingInbox(spec.id, looks)

    context = SchedulerContext(
        store=store,
        settings=fast_settings(store.url, poll_interval_seconds=poll_interval, scheduler_threads=2),
        runner="worker",
        location="test",
        source_factory=source,
    )
    runner = ThreadRunner(context)
    try:
        claims = context.leases().claim_unowned(100, runner="worker")
        runner.launch_claimed([(SchedulerSpec.parse(claim.scheduler_id), claim) for claim in claims])
        wakeups = context.wakeups()
        assert wait_until(lambda: len(wakeups.registered()) == 3 * len(ORGANISATIONS), 30)
        if store.is_postgresql:
            assert wait_until(lambda: wakeups.listening, 30)
        if poll_interval >= 10:  # the looks the registrations asked for are over; the next is far
            assert wait_until(lambda: looks_settled(runner.context), 30)
        yield runner, looks
    finally:
        runner.shutdown()
        context.leases().stop()


def looks_settled(context: SchedulerContext) -> bool:
    before = context.wakeups().looks
    time.sleep(0.5)
    return context.wakeups().looks == before


def insert_event_elsewhere(store: Store, scheduler_id: str, notify: bool = True) -> int:
    """An event written by another process (its own connection); without `notify`, with the triggers
    off, as if its notification were lost."""
    with psycopg.connect(libpq_conninfo(store.url), autocommit=True) as conn:
        if not notify:
            conn.execute("SET session_replication_role = replica")  # no trigger fires
        row = conn.execute(
            "INSERT INTO events (scheduler_id, kind, payload, created_at) VALUES (%s, %s, %s, now()) RETURNING seq",
            (scheduler_id, RAW_FILE["type"], Json(RAW_FILE)),
        ).fetchone()
    assert row is not None
    return int(row[0])


def consumed(store: Store, seq: int) -> bool:
    with store.session() as session:
        event = session.get(Event, seq)
        return event is not None and event.consumed_at is not None


def test_on_postgresql_an_event_from_another_process_wakes_its_scheduler_and_no_other(pg_store: Store) -> None:
    with running(pg_store, poll_interval=60) as (runner, looks):
        wakeups = runner.context.wakeups()
        looks_before, turns_before = wakeups.looks, dict(looks)
        seq = insert_event_elsewhere(pg_store, "normalizer-beta")
        assert wait_until(lambda: consumed(pg_store, seq), 20)
        assert wakeups.looks == looks_before  # the notification woke it, not the look (a minute away)
        assert looks["normalizer-beta"] > turns_before.get("normalizer-beta", 0)
        others = {sid: n for sid, n in looks.items() if sid != "normalizer-beta"}
        assert others == {sid: turns_before.get(sid, 0) for sid in others}  # nobody else took a turn


def test_on_postgresql_a_scheduler_that_drained_its_inbox_waits_to_be_woken(pg_store: Store) -> None:
    """Less than a batch received: no turn after it just to find nothing (after a burst across every
    organisation, such turns would queue up ahead of a quiet organisation's event)."""
    with running(pg_store, poll_interval=60) as (_runner, looks):
        before = looks["normalizer-beta"]
        seq = insert_event_elsewhere(pg_store, "normalizer-beta")
        assert wait_until(lambda: consumed(pg_store, seq), 20)
        time.sleep(0.5)
        assert looks["normalizer-beta"] == before + 1


def test_on_postgresql_a_full_batch_is_followed_by_a_turn_at_once(pg_store: Store) -> None:
    """More than a batch waiting, announced by one notification: the turn after a full batch comes at
    once, not at the process's next look (a minute away)."""
    batch = Scheduler.batch_size
    with running(pg_store, poll_interval=60) as (runner, looks):
        wakeups = runner.context.wakeups()
        looks_before, before = wakeups.looks, looks["normalizer-beta"]
        with psycopg.connect(libpq_conninfo(pg_store.url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO events (scheduler_id, kind, payload, created_at)"
                " SELECT 'normalizer-beta', %s, %s, now() FROM generate_series(1, %s)",
                (RAW_FILE["type"], Json(RAW_FILE), batch + 1),
            )
        with pg_store.session() as session:
            assert wait_until(lambda: pending_events(session, "normalizer-beta") == 0, 30)
        assert looks["normalizer-beta"] == before + 2
        assert wakeups.looks == looks_before


def pending_events(session: Session, scheduler_id: str) -> int:
    session.expire_all()
    return session.query(Event).filter(Event.scheduler_id == scheduler_id, Event.consumed_at.is_(None)).count()


def test_on_postgresql_a_lost_notification_costs_latency_not_the_event(pg_store: Store) -> None:
    with running(pg_store, poll_interval=0.2) as (runner, _looks):
        wakeups = runner.context.wakeups()
        looks_before = wakeups.looks
        seq = insert_event_elsewhere(pg_store, "normalizer-acme", notify=False)
        assert wait_until(lambda: consumed(pg_store, seq), 30)
        assert wakeups.looks > looks_before  # found by the process's look


def test_on_postgresql_inputs_written_while_nobody_listened_are_found_on_reconnect(pg_store: Store) -> None:
    with running(pg_store, poll_interval=60) as (runner, _looks):
        wakeups = runner.context.wakeups()
        with psycopg.connect(libpq_conninfo(pg_store.url), autocommit=True) as conn:
            cut = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE query = 'LISTEN baton_inputs' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert cut is not None and cut[0] == 1
        seq = insert_event_elsewhere(pg_store, "boefje-gamma")  # its notification reaches nobody
        assert wait_until(lambda: consumed(pg_store, seq), 30)  # the look after the reconnect found it
        assert wakeups.listening


def test_idle_schedulers_take_no_turns_and_an_event_still_wakes_its_scheduler(store: Store) -> None:
    """Both backends; on SQLite the look every poll interval is the only way."""
    with running(store, poll_interval=0.1) as (runner, looks):
        wakeups = runner.context.wakeups()
        turns_before, looks_before = sum(looks.values()), wakeups.looks
        assert wait_until(lambda: wakeups.looks >= looks_before + 5, 30)  # half a second of idling at least
        assert sum(looks.values()) == turns_before  # polling would have taken a turn each per interval
        with store.session() as session:
            seq = enqueue_event(session, "normalizer-gamma", RAW_FILE["type"], RAW_FILE).seq
        assert wait_until(lambda: consumed(store, seq), 30)


@pytest.mark.parametrize("deadline_offset", [timedelta(seconds=-1), timedelta(seconds=2)])
def test_a_due_schedule_wakes_its_scheduler(store: Store, deadline_offset: timedelta) -> None:
    """Due now (PostgreSQL: a notification) or in two seconds (the look finds it when it is due)."""
    with running(store, poll_interval=0.2):
        with store.session() as session:
            schedule = create_schedule(
                session,
                scheduler_id="report",
                organisation="beta",
                data={"report_recipe_id": "r", "organisation_id": "beta"},
                schedule=None,
                deadline_at=utcnow() + deadline_offset,
                schedule_hash=None,
            )

        def fired() -> bool:
            with store.session() as session:
                tasks = session.query(Task).filter(Task.scheduler_id == "report-beta").all()
                return [task.schedule_id for task in tasks] == [str(schedule.id)] and all(
                    task.status == TaskStatus.QUEUED.value for task in tasks
                )

        assert wait_until(fired, 30)


def test_a_process_that_runs_no_scheduler_stops_looking_and_listening(store: Store) -> None:
    """The last scheduler to end stops its process's look (and LISTEN connection); the next to begin
    starts them again."""

    def looking() -> set[str]:
        return {thread.name for thread in threading.enumerate()} & {"input-wakeups", "input-listener"}

    with running(store, poll_interval=0.1) as (runner, _looks):
        assert looking()
        everything = sorted(spec.id for spec in runner.list())
        runner.stop_many(everything, wait=True)
        assert wait_until(lambda: not looking(), 30)
        claims = runner.context.leases().claim(["normalizer-acme"], runner="worker")
        runner.launch_claimed([(SchedulerSpec.parse("normalizer-acme"), claims["normalizer-acme"])])
        assert wait_until(lambda: runner.context.wakeups().registered() == {"normalizer-acme"}, 30)
        assert looking()
        with store.session() as session:
            seq = enqueue_event(session, "normalizer-acme", RAW_FILE["type"], RAW_FILE).seq
        assert wait_until(lambda: consumed(store, seq), 30)
