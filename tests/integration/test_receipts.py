"""Pop receipts (core/receipts.py), on both backends: a pop answered with an error leaves no task
dispatched, and a pop retried with its idempotency key answers the tasks its first attempt took.

The lost acknowledgement is made real: the pop statement runs and commits, then the queue door raises
the error a connection broken during COMMIT raises, so the client is answered 503 for a pop the
database holds."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from baton.core.errors import DatabaseUnavailableError
from baton.core.settings import Settings
from baton.runtime import build_app, metrics_for, queue_service_for
from baton.storage.engine import Store
from harness.factories import add_organisation, push
from harness.waiting import wait_until

LOST = DatabaseUnavailableError("database connection lost; retry later", "server closed the connection unexpectedly")


class LostAcknowledgement:
    """The app's queue door, but a pop's answer is lost after its commit while `failing`."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.failing = True
        self.committed: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def pop(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """Every pop, a deduplication group's (a boefje pop of more than one task) among them."""
        return self.answer(await self.real.pop(*args, **kwargs))

    def answer(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.failing:
            return rows
        self.committed.extend(rows)
        raise LOST


@pytest.fixture
def lossy(settings: Settings, store: Store) -> Iterator[tuple[TestClient, LostAcknowledgement]]:
    add_organisation(store, "acme", maxsize=0)
    with TestClient(build_app(settings, store)) as client:
        queues = client.app.state.queues  # type: ignore[attr-defined]
        door = LostAcknowledgement(queues.door)
        queues.door = door
        yield client, door


def statuses(client: TestClient, queue: str = "boefje-acme") -> dict[str, str]:
    listing = client.get("/tasks", params={"scheduler_id": queue, "limit": 100}).json()
    return {task["id"]: task["status"] for task in listing["results"]}


def settled(client: TestClient) -> None:
    """Until the app has settled every receipt it holds (the settling runs on the server's loop)."""
    queues = client.app.state.queues  # type: ignore[attr-defined]
    client.portal.call(queues.settler.settled)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/queues/boefje-acme/pop", None),  # the fast path
        ("/schedulers/boefje-acme/pop?limit=2", None),  # the fast path, OpenKAT's dialect
        ("/queues/boefje-acme/pop", {"filters": None}),  # the route
        (
            "/schedulers/boefje/pop?limit=2",
            {"filters": [{"column": "data", "field": "n", "operator": "ge", "value": 0}]},
        ),
    ],
)
def test_a_pop_answered_with_an_error_leaves_no_task_dispatched(
    store: Store, lossy: tuple[TestClient, LostAcknowledgement], path: str, body: Any
) -> None:
    client, executor = lossy
    ids = [push(store, "boefje-acme", priority=priority, data={"n": priority}).task["id"] for priority in (5, 1, 3, 2)]
    answer = client.post(path, json=body) if body is not None else client.post(path)
    assert answer.status_code == 503 and answer.headers["Retry-After"]
    assert executor.committed, "the pop committed: its client was answered 503 all the same"
    settled(client)
    assert set(statuses(client).values()) == {"queued"}, "a task of the unanswered pop stayed dispatched"

    executor.failing = False  # the same tasks come first again: back in their place
    again = client.post("/schedulers/boefje-acme/pop?limit=4").json()["results"]
    assert [task["priority"] for task in again] == [1, 2, 3, 5]
    assert {task["id"] for task in executor.committed} <= {uuid.UUID(task["id"]) for task in again}
    assert sorted(uuid.UUID(task["id"]) for task in again) == sorted(ids)
    metrics = client.get("/metrics").text
    assert f"baton_pops_handed_back_total {float(len(executor.committed))}" in metrics


class SettlesLate:
    """The settler's queue door, refused (as in an outage) until `open`: a client reports meanwhile."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.open = False
        self.refused = 0

    def check(self) -> None:
        if not self.open:
            self.refused += 1
            raise DatabaseUnavailableError("database unavailable; retry later", "connection refused")

    async def settle(self, *args: Any) -> int:
        self.check()
        count: int = await self.real.settle(*args)
        return count

    async def settle_and_remember(self, *args: Any) -> int:
        self.check()
        count: int = await self.real.settle_and_remember(*args)
        return count

    async def settle_remembered(self, *args: Any) -> int:
        self.check()
        count: int = await self.real.settle_remembered(*args)
        return count


def test_a_task_a_client_reported_on_is_not_handed_back(
    store: Store, lossy: tuple[TestClient, LostAcknowledgement]
) -> None:
    """Settling changes only what is still dispatched under the receipt."""
    client, executor = lossy
    push(store, "boefje-acme", priority=1, data={})
    push(store, "boefje-acme", priority=2, data={})
    settler = client.app.state.queues.settler  # type: ignore[attr-defined]
    settler.door = late = SettlesLate(settler.door)
    assert client.post("/schedulers/boefje-acme/pop?limit=2").status_code == 503
    assert wait_until(lambda: late.refused > 0, 10)
    first, second = executor.committed
    assert client.patch(f"/tasks/{first['id']}", json={"status": "running"}).status_code == 200
    late.open = True  # the database answers the settler again
    settled(client)
    assert statuses(client) == {str(first["id"]): "running", str(second["id"]): "queued"}


# -- idempotency keys -----------------------------------------------------------------------------------


def keyed(client: TestClient, key: str, path: str = "/queues/boefje-acme/pop") -> Any:
    answer = client.post(path, headers={"Idempotency-Key": key})
    assert answer.status_code == 200, answer.text
    return answer.json()


def unstamped(task: dict[str, Any]) -> dict[str, Any]:
    """A task but for `modified_at`, which a delivery sets."""
    return {name: value for name, value in task.items() if name != "modified_at"}


def test_a_retried_pop_with_the_same_key_answers_the_same_tasks(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    for n in range(6):
        push(store, "boefje-acme", priority=n, data={"n": n})
    first = keyed(client, "attempt-1")
    assert unstamped(keyed(client, "attempt-1")) == unstamped(first)  # the same task, delivered again
    other = keyed(client, "attempt-2")
    assert other["id"] != first["id"]
    by_query = client.post("/queues/boefje-acme/pop", params={"idempotency_key": "attempt-2"}).json()
    assert by_query["id"] == other["id"]  # Baton's dialect: the query parameter is the same key
    # OpenKAT's dialect: a key per queue or type; the same key elsewhere is another pop.
    many = keyed(client, "attempt-1", "/schedulers/boefje/pop?limit=2")["results"]
    assert len(many) == 2 and first["id"] not in {task["id"] for task in many}
    again = keyed(client, "attempt-1", "/schedulers/boefje/pop?limit=2")["results"]
    assert [unstamped(task) for task in again] == [unstamped(task) for task in many]
    dispatched = [status for status in statuses(client).values() if status == "dispatched"]
    assert len(dispatched) == 4, "a retry handed out new tasks"


def test_a_key_answers_only_what_is_still_dispatched_under_it(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    for n in range(3):
        push(store, "boefje-acme", priority=n, data={"n": n})
    tasks = keyed(client, "k", "/schedulers/boefje-acme/pop?limit=2")["results"]
    assert client.patch(f"/tasks/{tasks[0]['id']}", json={"status": "running"}).status_code == 200
    again = keyed(client, "k", "/schedulers/boefje-acme/pop?limit=2")["results"]
    assert [task["id"] for task in again] == [tasks[1]["id"]]


def test_an_empty_answer_does_not_hold_its_key(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    assert keyed(client, "early") is None
    task = push(store, "boefje-acme", priority=1, data={})
    assert keyed(client, "early")["id"] == str(task.task["id"])


def test_an_expired_key_pops_new_tasks(store: Store, database_url: str) -> None:
    add_organisation(store, "acme", maxsize=0)
    for n in range(2):
        push(store, "boefje-acme", priority=n, data={"n": n})
    settings = Settings(database_url=database_url, pop_receipt_seconds=3.0)
    with TestClient(build_app(settings, store)) as client:
        first = keyed(client, "short")
        assert keyed(client, "short")["id"] == first["id"]
        time.sleep(3.1)  # past the key's time (not a measurement: the key must have expired)
        assert keyed(client, "short")["id"] != first["id"]


def test_a_retry_after_an_error_answer_gets_the_tasks_again(
    store: Store, lossy: tuple[TestClient, LostAcknowledgement]
) -> None:
    """The first attempt's answer was lost and its receipt settled: the key is free, and the retry
    pops the same task afresh."""
    client, executor = lossy
    push(store, "boefje-acme", priority=1, data={})
    assert client.post("/queues/boefje-acme/pop", headers={"Idempotency-Key": "lost"}).status_code == 503
    settled(client)
    executor.failing = False
    assert keyed(client, "lost")["id"] == str(executor.committed[0]["id"])


@pytest.mark.parametrize(
    ("headers", "params", "field"),
    [
        ({"Idempotency-Key": "x" * 201}, {}, "Idempotency-Key"),
        ({"Idempotency-Key": "tab\there"}, {}, "Idempotency-Key"),
        ({}, {"idempotency_key": "é"}, "idempotency_key"),
        ({}, {"idempotency_key": ""}, "idempotency_key"),
        ({"Idempotency-Key": "a"}, {"idempotency_key": "b"}, "idempotency_key"),
    ],
)
def test_a_key_that_cannot_be_one_is_refused_naming_it(
    store: Store, client: TestClient, headers: dict[str, str], params: dict[str, str], field: str
) -> None:
    add_organisation(store, "acme", maxsize=0)
    push(store, "boefje-acme", priority=1, data={})
    answer = client.post("/queues/boefje-acme/pop", headers=headers, params=params)
    assert answer.status_code == 422
    assert answer.json()["message"].startswith(f"{field}: ")
    assert set(statuses(client).values()) == {"queued"}


# -- the group pop (PostgreSQL) ------------------------------------------------------------------------


def test_a_group_pop_whose_acknowledgement_was_lost_leaves_no_task_dispatched(pg_store: Store) -> None:
    """Concurrent pops of one queue share one statement (storage/queues/popbatch.py), stamped with one
    receipt; that statement commits and its connection breaks: every waiter answers 503, and the
    batch's tasks go back."""
    from baton.core.queueing import PopRequest
    from baton.storage.queues.door import QueueDoor

    add_organisation(pg_store, "acme", maxsize=0)
    for n in range(20):
        push(pg_store, "boefje-acme", priority=1, data={"n": n})
    door = QueueDoor(pg_store, deduplicate=False)
    real_execute = door.link._execute  # type: ignore[attr-defined]
    statements_run = []

    async def commit_then_break(sql: str, params: dict[str, Any], until: Any) -> list[dict[str, Any]]:
        rows = await real_execute(sql, params, until)
        if "receipt_" in params:
            statements_run.append(rows)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return rows

    door.link._execute = commit_then_break  # type: ignore[attr-defined]
    # Deduplication off: a boefje pop of two tasks is then the grouped pop (on, a deduplication group's).
    settings = Settings(database_url=pg_store.url, deduplicate=False)
    queues = queue_service_for(settings, pg_store, door, metrics_for(pg_store))

    async def scenario() -> list[Any]:
        try:
            outcomes = await asyncio.gather(
                *(queues.pop(PopRequest(queues.target(queue="boefje-acme"), 2)) for _ in range(8)),
                return_exceptions=True,
            )
            await queues.settler.settled()
            return outcomes
        finally:
            await queues.close()

    outcomes = asyncio.run(scenario())
    assert all(isinstance(outcome, DatabaseUnavailableError) for outcome in outcomes)
    assert len(statements_run) < 8, "the pops were not grouped"
    assert sum(len(rows) for rows in statements_run) == 16
    with pg_store.session() as session:
        from sqlalchemy import text

        counts = dict(session.execute(text("SELECT status, count(*) FROM tasks GROUP BY status")).all())
    assert counts == {"queued": 20}
    pg_store.dispose()


def test_housekeeping_forgets_keys_past_their_time(store: Store, database_url: str) -> None:
    from sqlalchemy import func, select

    from baton.control.housekeeping import Housekeeping
    from baton.storage.tables import PopReceipt

    add_organisation(store, "acme", maxsize=0)
    push(store, "boefje-acme", priority=1, data={})
    push(store, "boefje-acme", priority=2, data={})
    settings = Settings(database_url=database_url, pop_receipt_seconds=1.0)
    with TestClient(build_app(settings, store)) as client:
        keyed(client, "kept-briefly")
        keyed(client, "another", "/queues/boefje-acme/pop")

    def keys() -> int:
        with store.session() as session:
            return int(session.scalar(select(func.count()).select_from(PopReceipt)) or 0)

    housekeeping = Housekeeping(store, settings)
    assert housekeeping.forget_expired_keys() == 0 and keys() == 2  # within their time: kept
    forgotten = []
    assert wait_until(lambda: forgotten.append(housekeeping.forget_expired_keys()) or sum(forgotten) == 2, 10)
    assert keys() == 0
