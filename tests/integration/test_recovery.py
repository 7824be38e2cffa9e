"""Recovery of tasks nobody reports on (core/recovery.py), on both backends: a running task is never
handed out again by default (OpenKAT's runners report only at start and end), a dispatched task nobody
started is handed out again under a new id (so a runner still holding the old one cannot start it), a
running task past its limit fails, the rule before is a setting, never twice at once."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from baton.control.director import Director
from baton.control.housekeeping import Housekeeping
from baton.control.runners import ThreadRunner
from baton.core.model import TaskStatus, utcnow
from baton.core.recovery import REPLACED_PREFIX, RecoveryRule
from baton.core.settings import Settings
from baton.ingest.scheduler import SchedulerContext
from baton.runtime import build_app
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.tables import Organisation, Task
from tests import queue_api as queue

HOUR = timedelta(hours=1)


def setup_tasks(
    store: Store, count: int, status: TaskStatus, age: timedelta, task_hash: str | None = None
) -> list[str]:
    ids = []
    with store.session() as session:
        if session.get(Organisation, "acme") is None:
            create_organisation(session, "acme", "Acme", maxsize=0)
    for n in range(count):
        with store.session() as session:
            task_id = queue.push(
                session, "boefje-acme", priority=1, data={"n": n}, task_hash=task_hash, schedule_id="s-1"
            ).task.id
            task = queue.get_task(session, task_id)
            task.status = status.value
            task.modified_at = utcnow() - age
            ids.append(str(task.id))
    return ids


def tasks(store: Store) -> dict[str, Task]:
    with store.session() as session:
        rows = session.scalars(select(Task)).all()
        session.expunge_all()
    return {str(task.id): task for task in rows}


def statuses(store: Store) -> dict[str, tuple[str, int]]:
    return {task_id: (task.status, task.attempts) for task_id, task in tasks(store).items()}


def recover(store: Store, **settings: Any) -> tuple[int, int]:
    return Housekeeping(store, Settings(database_url=store.url, **settings)).recover_stuck_tasks()


def replacement_of(store: Store, old_id: str) -> Task:
    """The task recovery queued for `old_id`'s job, found by the old one's reason."""
    old = tasks(store)[old_id]
    assert old.reason is not None and old.reason.startswith(REPLACED_PREFIX), old.reason
    return tasks(store)[old.reason.removeprefix(REPLACED_PREFIX).split(":", 1)[0]]


def test_a_running_task_is_never_handed_out_again_by_default(store: Store) -> None:
    """An nmap scan of two hours: its runner reported `running` when it started and says nothing
    until it ends. By default nothing touches it, however long past the task timeout."""
    running = setup_tasks(store, 2, TaskStatus.RUNNING, 2 * HOUR)
    running += setup_tasks(store, 1, TaskStatus.RUNNING, timedelta(hours=23))
    assert recover(store) == (0, 0)
    assert statuses(store) == {task_id: ("running", 0) for task_id in running}
    with store.session() as session:
        assert queue.pop(session, scheduler_id="boefje-acme", limit=10) == []


def test_a_dispatched_task_nobody_started_is_handed_out_again_under_a_new_id(store: Store) -> None:
    [stuck] = setup_tasks(store, 1, TaskStatus.DISPATCHED, HOUR, task_hash="h1")
    [fresh] = setup_tasks(store, 1, TaskStatus.DISPATCHED, timedelta(minutes=5))
    [done] = setup_tasks(store, 1, TaskStatus.COMPLETED, timedelta(days=1))
    assert recover(store) == (1, 0)
    old, new = tasks(store)[stuck], replacement_of(store, stuck)
    assert (old.status, old.attempts) == ("cancelled", 0)
    assert "BATON_TASK_TIMEOUT_SECONDS" in (old.reason or "")
    assert (new.status, new.attempts, new.hash, new.priority) == ("queued", 1, "h1", old.priority)
    assert (new.schedule_id, new.organisation, new.data) == (old.schedule_id, "acme", old.data)
    assert str(old.id) in (new.reason or "")
    assert statuses(store)[fresh] == ("dispatched", 0) and statuses(store)[done] == ("completed", 0)
    with store.session() as session:
        assert [task.id for task in queue.pop(session, scheduler_id="boefje-acme", limit=10)] == [new.id]
        queue.queue_size(session, "boefje-acme")  # the counters agree with a real count


def test_a_running_task_with_no_end_after_the_limit_fails_with_a_reason(store: Store) -> None:
    """The limit defaults to the grace period (24 h): the object is scanned again at its next rescan."""
    [stale] = setup_tasks(store, 1, TaskStatus.RUNNING, timedelta(hours=25))
    [long] = setup_tasks(store, 1, TaskStatus.RUNNING, timedelta(hours=23))
    assert recover(store) == (0, 1)
    task = tasks(store)[stale]
    assert task.status == "failed" and "BATON_RUNNING_TASK_LIMIT_SECONDS" in (task.reason or "")
    assert statuses(store)[long] == ("running", 0)
    assert recover(store, running_task_limit_seconds=3600) == (0, 1)
    assert statuses(store)[long][0] == "failed"


def test_a_running_task_limit_of_zero_never_fails_one(store: Store) -> None:
    setup_tasks(store, 1, TaskStatus.RUNNING, timedelta(days=30))
    assert recover(store, running_task_limit_seconds=0) == (0, 0)
    assert recover(store, grace_period_seconds=0) == (0, 0)  # unset, it follows the grace period


def test_the_rule_before_hands_out_running_tasks_again_when_switched_on(store: Store) -> None:
    [silent] = setup_tasks(store, 1, TaskStatus.RUNNING, HOUR)
    assert recover(store) == (0, 0)
    assert recover(store, requeue_running_tasks=True) == (1, 0)
    old, new = tasks(store)[silent], replacement_of(store, silent)
    assert old.status == "failed" and "while running" in (old.reason or "")
    assert (new.status, new.attempts) == ("queued", 1)


def test_a_job_that_keeps_getting_stuck_fails_with_a_reason(store: Store) -> None:
    [task_id] = setup_tasks(store, 1, TaskStatus.DISPATCHED, HOUR)
    for attempt in range(1, 3):
        assert recover(store, task_max_attempts=3) == (1, 0)
        task_id = str(replacement_of(store, task_id).id)
        with store.session() as session:
            [popped] = queue.pop(session, scheduler_id="boefje-acme")
            assert str(popped.id) == task_id
            queue.get_task(session, popped.id).modified_at = utcnow() - HOUR
        assert statuses(store)[task_id] == ("dispatched", attempt)
    assert recover(store, task_max_attempts=3) == (0, 1)
    task = tasks(store)[task_id]
    assert task.status == "failed" and task.attempts == 3 and "3 attempts" in (task.reason or "")
    assert sum(task.attempts for task in tasks(store).values()) == 3  # one per recovery: the metric


def test_a_stuck_task_whose_twin_is_queued_again_is_cancelled_not_duplicated(store: Store) -> None:
    [stuck] = setup_tasks(store, 1, TaskStatus.DISPATCHED, HOUR, task_hash="same")
    with store.session() as session:
        twin = queue.push(session, "boefje-acme", priority=1, data={}, task_hash="same").task
    assert recover(store) == (0, 0)
    state = statuses(store)
    assert state[stuck][0] == "cancelled" and state[str(twin.id)] == ("queued", 0)
    assert len(state) == 2


def test_a_runner_still_holding_a_replaced_task_can_neither_start_nor_hand_it_back(
    client: TestClient, store: Store
) -> None:
    """OpenKAT's runner pops a few tasks ahead of its workers: one may wait in its local queue past the
    task timeout while another runner runs the replacement. When a worker gets to it at last, its
    PATCH `running` is refused (the runner then leaves it), and so is the whole task it pushes back
    on shutdown: the scan runs once."""
    client.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
    job = {
        "id": None,
        "boefje": {"id": "dns-records", "name": "DNS records", "version": None, "oci_image": None},
        "input_ooi": "Hostname|internet|a.example",
        "organization": "acme",
        "deduplication_key": None,
    }
    pushed = client.post("/schedulers/boefje/push", json={"organisation": "acme", "priority": 1, "data": job})
    assert pushed.status_code == 201, pushed.text
    [held] = client.post("/schedulers/boefje/pop").json()["results"]
    with store.session() as session:
        queue.get_task(session, uuid.UUID(held["id"])).modified_at = utcnow() - HOUR
    assert recover(store) == (1, 0)
    [again] = client.post("/schedulers/boefje/pop").json()["results"]
    assert again["id"] != held["id"] and again["data"]["id"] == again["id"] and again["hash"] == held["hash"]
    assert client.patch(f"/tasks/{again['id']}", json={"status": "running"}).status_code == 200
    late = client.patch(f"/tasks/{held['id']}", json={"status": "running"})
    assert late.status_code == 409, late.text
    handed_back = client.post("/schedulers/boefje/push", json=held)
    assert handed_back.status_code == 409, handed_back.text
    assert client.patch(f"/tasks/{again['id']}", json={"status": "completed"}).status_code == 200
    assert client.get(f"/tasks/{held['id']}").json()["status"] == "cancelled"
    assert client.post("/schedulers/boefje/pop").json()["results"] == []


def test_concurrent_recoveries_recover_each_task_once(pg_store: Store) -> None:
    setup_tasks(pg_store, 300, TaskStatus.DISPATCHED, HOUR)
    rule = RecoveryRule.from_settings(Settings(database_url=pg_store.url))
    totals: list[tuple[int, int]] = []
    lock = threading.Lock()

    def replica() -> None:
        for _ in range(5):
            with pg_store.session() as session:
                result = queue.recover_stuck(session, rule, utcnow(), limit=40)
            with lock:
                totals.append(result)

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(requeued for requeued, _ in totals) == 300
    state = statuses(pg_store)
    assert sorted(state.values()).count(("queued", 1)) == 300
    assert sorted(state.values()).count(("cancelled", 0)) == 300


def test_leader_recovers_and_reports_itself_in_metrics(store: Store) -> None:
    setup_tasks(store, 2, TaskStatus.DISPATCHED, HOUR)
    setup_tasks(store, 1, TaskStatus.RUNNING, HOUR)  # left alone
    settings = Settings(database_url=store.url, task_timeout_seconds=60)
    runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="t"))
    director = Director(store, settings, runner, holder="director-1")
    try:
        report = director.step()
        assert report is not None and (report.requeued, report.failed) == (2, 0)
    finally:
        director.stop()
    with TestClient(build_app(settings, store)) as client:
        text = client.get("/metrics").text
    assert 'baton_leader{holder="director-1",role="director"} 1.0' in text
    assert "baton_tasks_recovered_total 2.0" in text
    assert 'baton_leader_renewal_age_seconds{role="director"}' in text
