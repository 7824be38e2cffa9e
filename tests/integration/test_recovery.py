"""Stuck-task recovery: re-queue silent tasks, give up after N attempts, never twice at once."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

from fastapi.testclient import TestClient

from baton.api import create_app
from baton.control.director import Director
from baton.control.runners import ThreadRunner
from baton.core.model import TaskStatus, utcnow
from baton.core.settings import Settings
from baton.ingest.scheduler import SchedulerContext
from baton.storage.engine import Store
from baton.storage.organisations import create_organisation
from baton.storage.tables import Organisation, Task
from tests import queue_api as queue


def setup_tasks(
    store: Store, count: int, status: TaskStatus, age: timedelta, task_hash: str | None = None
) -> list[str]:
    ids = []
    with store.session() as session:
        if session.get(Organisation, "acme") is None:
            create_organisation(session, "acme", "Acme", maxsize=0)
    for n in range(count):
        with store.session() as session:
            task_id = queue.push(session, "boefje-acme", priority=1, data={"n": n}, task_hash=task_hash).task.id
            task = queue.get_task(session, task_id)
            task.status = status.value
            task.modified_at = utcnow() - age
            ids.append(str(task.id))
    return ids


def statuses(store: Store) -> dict[str, tuple[str, int]]:
    with store.session() as session:
        return {str(task.id): (task.status, task.attempts) for task in session.query(Task).all()}


def recover(store: Store, max_attempts: int = 3) -> tuple[int, int]:
    with store.session() as session:
        return queue.requeue_stuck(session, older_than=utcnow() - timedelta(minutes=30), max_attempts=max_attempts)


def test_silent_tasks_are_requeued_and_fresh_ones_left_alone(store: Store) -> None:
    stuck = setup_tasks(store, 2, TaskStatus.DISPATCHED, timedelta(hours=1))
    stuck += setup_tasks(store, 1, TaskStatus.RUNNING, timedelta(hours=2))
    fresh = setup_tasks(store, 2, TaskStatus.RUNNING, timedelta(minutes=1))
    done = setup_tasks(store, 1, TaskStatus.COMPLETED, timedelta(days=1))
    assert recover(store) == (3, 0)
    state = statuses(store)
    assert all(state[task_id] == ("queued", 1) for task_id in stuck)
    assert all(state[task_id] == ("running", 0) for task_id in fresh)
    assert state[done[0]] == ("completed", 0)
    with store.session() as session:
        assert {str(t.id) for t in queue.pop(session, scheduler_id="boefje-acme", limit=10)} == set(stuck)


def test_a_task_that_keeps_getting_stuck_fails_with_a_reason(store: Store) -> None:
    [task_id] = setup_tasks(store, 1, TaskStatus.DISPATCHED, timedelta(hours=1))
    for attempt in range(1, 3):
        assert recover(store, max_attempts=3) == (1, 0)
        with store.session() as session:
            popped = queue.pop(session, scheduler_id="boefje-acme")[0]
            queue.get_task(session, popped.id).modified_at = utcnow() - timedelta(hours=1)
        assert statuses(store)[task_id] == ("dispatched", attempt)
    assert recover(store, max_attempts=3) == (0, 1)
    with store.session() as session:
        task = queue.get_task(session, uuid.UUID(task_id))
        assert task.status == "failed" and task.attempts == 3 and "3 attempts" in (task.reason or "")


def test_a_stuck_task_whose_twin_is_queued_again_is_cancelled_not_duplicated(store: Store) -> None:
    [stuck] = setup_tasks(store, 1, TaskStatus.DISPATCHED, timedelta(hours=1), task_hash="same")
    with store.session() as session:
        twin = queue.push(session, "boefje-acme", priority=1, data={}, task_hash="same").task
    assert recover(store) == (0, 0)
    state = statuses(store)
    assert state[stuck][0] == "cancelled" and state[str(twin.id)] == ("queued", 0)


def test_concurrent_recoveries_recover_each_task_once(pg_store: Store) -> None:
    setup_tasks(pg_store, 300, TaskStatus.DISPATCHED, timedelta(hours=1))
    totals: list[tuple[int, int]] = []
    lock = threading.Lock()

    def replica() -> None:
        for _ in range(5):
            with pg_store.session() as session:
                result = queue.requeue_stuck(
                    session, older_than=utcnow() - timedelta(minutes=30), max_attempts=3, limit=40
                )
            with lock:
                totals.append(result)

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(requeued for requeued, _ in totals) == 300
    assert all(value == ("queued", 1) for value in statuses(pg_store).values())


def test_leader_recovers_and_reports_itself_in_metrics(store: Store) -> None:
    setup_tasks(store, 2, TaskStatus.RUNNING, timedelta(hours=1))
    settings = Settings(database_url=store.url, task_timeout_seconds=60)
    runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="t"))
    director = Director(store, settings, runner, holder="director-1")
    try:
        report = director.step()
        assert report is not None and report.requeued == 2
    finally:
        director.stop()
    with TestClient(create_app(settings, store)) as client:
        text = client.get("/metrics").text
    assert 'baton_leader{holder="director-1",role="director"} 1.0' in text
    assert "baton_tasks_recovered_total 2.0" in text
    assert 'baton_leader_renewal_age_seconds{role="director"}' in text
