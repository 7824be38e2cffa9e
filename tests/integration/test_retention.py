"""Retention: finished tasks past BATON_TASK_RETENTION_DAYS go, in bounded batches; everything else
stays (live tasks, recent ones, schedules, the boefje-run record), and the queue counters stay right.
Housekeeping where no director runs: one process at a time, by lease."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text

from baton.control import housekeeping
from baton.control.director import Director
from baton.control.housekeeping import Housekeeper, Housekeeping
from baton.control.runners import ThreadRunner
from baton.core.model import TaskStatus, utcnow
from baton.core.settings import Settings
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.leadership import HOUSEKEEPER_ROLE, leadership
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues.retention import delete_consumed_events, delete_finished
from baton.storage.scheduling.boefje_runs import claim_boefje_runs
from baton.storage.scheduling.schedules import create_schedule
from baton.storage.tables import BoefjeRun, Event, Organisation, Schedule, Task
from tests import queue_api as queue

QUEUE = "boefje-acme"
OLD = timedelta(days=40)
RECENT = timedelta(days=2)


def settings_for(store: Store, days: int = 30) -> Settings:
    return Settings(
        database_url=store.url, task_retention_days=days, event_retention_days=days, retry_period_seconds=0.2
    )


def add_tasks(store: Store, count: int, status: TaskStatus, age: timedelta, scheduler_id: str = QUEUE) -> list[str]:
    """`count` tasks pushed, then put in `status`, last changed `age` ago (one transaction)."""
    with store.session() as session:
        if session.get(Organisation, "acme") is None:
            create_organisation(session, "acme", "Acme", maxsize=0)
    with store.session() as session:
        pushed = [
            queue.push(session, scheduler_id, priority=1, data={"n": n}, schedule_id="s-1").task.id
            for n in range(count)
        ]
        for task_id in pushed:
            task = queue.get_task(session, task_id)
            task.status, task.modified_at = status.value, utcnow() - age
    return [str(task_id) for task_id in pushed]


def remaining(store: Store) -> dict[str, str]:
    with store.session() as session:
        return {str(task.id): task.status for task in session.scalars(select(Task))}


def counters(store: Store) -> dict[str, tuple[int, int]]:
    """Every queue's counters, checked against a real count (tests/queue_api.py)."""
    with store.session() as session:
        for scheduler_id in ("boefje-acme", "normalizer-acme"):
            queue.queue_size(session, scheduler_id)
        return {
            scheduler_id: (int(queued), int(in_flight))
            for scheduler_id, queued, in_flight in session.execute(
                text("SELECT scheduler_id, sum(queued), sum(in_flight) FROM queue_counters GROUP BY scheduler_id")
            )
        }


def test_finished_tasks_past_retention_go_and_everything_else_stays(store: Store) -> None:
    expired = []
    for status in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED):
        expired += add_tasks(store, 3, status, OLD)
    recent = add_tasks(store, 2, TaskStatus.COMPLETED, RECENT)
    # Live tasks are never removed, however long ago they last changed (recovery deals with those).
    live = add_tasks(store, 2, TaskStatus.QUEUED, OLD) + add_tasks(store, 1, TaskStatus.DISPATCHED, OLD)
    live += add_tasks(store, 1, TaskStatus.RUNNING, OLD)
    with store.session() as session:
        create_schedule(
            session,
            scheduler_id="boefje",
            organisation="acme",
            data={"boefje": {"id": "dns-records"}},
            schedule="0 0 * * *",
            deadline_at=utcnow() - OLD,
            schedule_hash="s-1",
        )
        claim_boefje_runs(session, "acme", [("dns-records", "Hostname|internet|a.example")], utcnow() - OLD, RECENT)

    removed = Housekeeping(store, settings_for(store)).remove_expired()

    assert removed == len(expired) == 9
    left = remaining(store)
    assert set(left) == set(recent) | set(live)
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Schedule)) == 1
        assert session.scalar(select(func.count()).select_from(BoefjeRun)) == 1


def test_retention_of_zero_days_keeps_every_task(store: Store) -> None:
    kept = add_tasks(store, 3, TaskStatus.COMPLETED, timedelta(days=3650))
    assert Housekeeping(store, settings_for(store, days=0)).remove_expired() == 0
    assert set(remaining(store)) == set(kept)


def test_by_default_every_task_is_kept_as_mula_keeps_them(store: Store) -> None:
    """rocky lists every task and counts them in its statistics: nothing goes unless retention is set."""
    kept = add_tasks(store, 2, TaskStatus.COMPLETED, timedelta(days=3650))
    kept += add_tasks(store, 1, TaskStatus.FAILED, timedelta(days=3650))
    with store.session() as session:  # the inbox keeps its own retention: consumed events still go
        session.add(Event(scheduler_id=QUEUE, kind="old", payload={}, consumed_at=utcnow() - OLD))
        session.add(Event(scheduler_id=QUEUE, kind="recent", payload={}, consumed_at=utcnow() - RECENT))
    report = Housekeeping(store, Settings(database_url=store.url)).round()
    assert report.removed == 0
    assert set(remaining(store)) == set(kept)
    with store.session() as session:
        assert list(session.scalars(select(Event.kind))) == ["recent"]


def test_removing_finished_tasks_leaves_the_queue_counters_right(store: Store) -> None:
    add_tasks(store, 4, TaskStatus.QUEUED, OLD)
    add_tasks(store, 2, TaskStatus.DISPATCHED, RECENT)
    add_tasks(store, 5, TaskStatus.COMPLETED, OLD)
    add_tasks(store, 3, TaskStatus.FAILED, OLD, scheduler_id="normalizer-acme")
    before = counters(store)
    assert before["boefje-acme"] == (4, 2)

    assert Housekeeping(store, settings_for(store)).remove_expired() == 8

    assert counters(store) == before


def test_a_removal_batch_writes_no_counter_row(pg_store: Store) -> None:
    """PostgreSQL: pops and pushes update the counter rows of their queue; a removal batch that wrote
    them too (even with deltas of zero) would make them wait for its commit."""
    add_tasks(pg_store, 3, TaskStatus.QUEUED, OLD)
    add_tasks(pg_store, 20, TaskStatus.COMPLETED, OLD)
    versions = "SELECT scheduler_id, shard, xmin::text FROM queue_counters ORDER BY 1, 2"
    with pg_store.session() as session:
        before = session.execute(text(versions)).all()
    with pg_store.session() as session:
        assert delete_finished(session, utcnow() - timedelta(days=30), 100) == 20
    with pg_store.session() as session:
        assert session.execute(text(versions)).all() == before


def test_removal_is_bounded_per_round_and_resumes_in_the_next(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "RETENTION_BATCH", 10)
    add_tasks(store, 25, TaskStatus.COMPLETED, OLD)
    work = Housekeeping(store, settings_for(store))
    assert work.remove_expired(seconds=0) == 10  # one batch, then the round's time is up
    assert work.remove_expired() == 15
    assert remaining(store) == {}


def test_concurrent_removers_remove_each_task_once(pg_store: Store) -> None:
    add_tasks(pg_store, 300, TaskStatus.COMPLETED, OLD)
    totals: list[int] = []
    lock = threading.Lock()

    def remover() -> None:
        while True:
            with pg_store.session() as session:
                removed = delete_finished(session, utcnow() - timedelta(days=30), 7)
            with lock:
                totals.append(removed)
            if not removed:
                return

    threads = [threading.Thread(target=remover) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(totals) == 300 and remaining(pg_store) == {}


def backend_on_shard(url: str, shard: int) -> Store:
    """A store whose connection writes counter shard `shard` (pg_backend_pid() % 8, migration 0004)."""
    for _ in range(200):
        store = Store(url)
        with store.session() as session:
            if session.scalar(text("SELECT pg_backend_pid() % 8")) == shard:
                return store
        store.dispose()
    raise AssertionError(f"no backend on shard {shard} in 200 connections")


def test_pops_and_pushes_do_not_wait_for_an_open_removal_batch(pg_store: Store) -> None:
    add_tasks(pg_store, 2, TaskStatus.QUEUED, OLD)
    add_tasks(pg_store, 50, TaskStatus.COMPLETED, OLD)
    with pg_store.session() as removal:
        shard = removal.scalar(text("SELECT pg_backend_pid() % 8"))
        assert delete_finished(removal, utcnow() - timedelta(days=30), 1000) == 50
        # The counter shard the removal's own connection would have written, had it written one.
        other = backend_on_shard(pg_store.url, int(shard or 0))
        try:
            with other.session() as session:
                session.execute(text("SET LOCAL lock_timeout = '2s'"))
                queue.push(session, QUEUE, priority=1, data={"during": "removal"})
                assert len(queue.pop(session, scheduler_id=QUEUE)) == 1
        finally:
            other.dispose()


def test_the_leading_director_removes_expired_tasks(store: Store) -> None:
    add_tasks(store, 4, TaskStatus.CANCELLED, OLD)
    settings = settings_for(store)
    runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="t"))
    director = Director(store, settings, runner, holder="director-1")
    try:
        report = director.step()
        assert report is not None and report.removed == 4
    finally:
        director.stop()
    assert remaining(store) == {}


def test_one_housekeeper_at_a_time_and_another_takes_over_when_it_stops(store: Store) -> None:
    """Workers have no director: their housekeepers share a lease; the holder recovers stuck tasks
    and removes expired ones, the others wait, and one of them takes over when the holder stops."""
    stuck = add_tasks(store, 2, TaskStatus.DISPATCHED, timedelta(hours=2))
    add_tasks(store, 3, TaskStatus.COMPLETED, OLD)
    settings = settings_for(store)
    first = Housekeeper(store, settings, holder="worker-1")
    second = Housekeeper(store, settings, holder="worker-2")
    try:
        report = first.step()
        assert report is not None and (report.requeued, report.removed) == (2, 3)
        assert second.step() is None
        with store.session() as session:
            holder = leadership(session, HOUSEKEEPER_ROLE)
            assert holder is not None and holder.holder == "worker-1"
        left = remaining(store)  # each stuck task cancelled, and handed out again as a new one
        assert {left[task_id] for task_id in stuck} == {"cancelled"}
        assert sorted(left.values()) == ["cancelled", "cancelled", "queued", "queued"]

        first.stop()  # gives the lease up
        add_tasks(store, 1, TaskStatus.FAILED, OLD)
        report = second.step()
        assert report is not None and report.removed == 1
    finally:
        first.stop()
        second.stop()


def test_consumed_events_past_retention_go_and_pending_ones_stay(store: Store) -> None:
    """The inbox keeps every event until it is consumed; consumed ones (and dead letters) go after
    BATON_EVENT_RETENTION_DAYS, so the events table does not grow for ever."""
    add_tasks(store, 1, TaskStatus.QUEUED, RECENT)  # the organisation and its schedulers
    now = utcnow()
    with store.session() as session:
        for kind, consumed in (
            ("old consumed", now - OLD),
            ("old dead letter", now - OLD),
            ("recent consumed", now - RECENT),
            ("pending", None),
        ):
            error = "malformed" if kind == "old dead letter" else None
            session.add(
                Event(
                    scheduler_id=QUEUE, kind=kind, payload={}, created_at=now - OLD, consumed_at=consumed, error=error
                )
            )
    report = Housekeeping(store, settings_for(store)).round()
    with store.session() as session:
        kept = sorted(session.scalars(select(Event.kind)))
    assert kept == ["pending", "recent consumed"]
    assert report.removed == 0  # tasks: the recent queued one stays
    with store.session() as session:
        assert delete_consumed_events(session, utcnow() + timedelta(days=1), 10) == 1  # only the consumed one
