"""A boefje pop whose first task carries a `deduplication_key` hands out, up to `limit`, the queued tasks
of any organisation sharing that key, all dispatched in one transaction (mula's pop_boefje). On both
backends, through the API (Baton's and OpenKAT's dialect) and, for concurrency, many pops at once."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import orjson
from fastapi.testclient import TestClient

from baton.core.model import utcnow
from baton.core.queueing import PopRequest, PopTarget, PushRequest
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.queues.door import QueueDoor
from baton.storage.queues.pops import together_statement
from baton.storage.queues.statements import dialect_of

ORGS = ("acme", "beta", "gamma", "delta")


def boefje_data(org: str, ooi: str, key: uuid.UUID | None) -> dict[str, Any]:
    data: dict[str, Any] = {"boefje": {"id": "dns-records"}, "input_ooi": ooi, "organization": org}
    if key is not None:
        data["deduplication_key"] = str(key)
    return data


def push(client: TestClient, org: str, ooi: str, priority: int, key: uuid.UUID | None = None) -> str:
    body = {"priority": priority, "data": boefje_data(org, ooi, key), "hash": f"{org}|{ooi}"}
    answer = client.post(f"/queues/boefje-{org}/push", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def statuses(client: TestClient, ids: list[str]) -> list[str]:
    return [client.get(f"/tasks/{task_id}").json()["status"] for task_id in ids]


def organisations(client: TestClient) -> None:
    for org in ORGS:
        client.post("/organisations", json={"id": org, "name": org}).raise_for_status()


def test_a_group_pops_together_up_to_the_limit_and_only_queued_tasks(client: TestClient) -> None:
    organisations(client)
    key = uuid.uuid4()
    original = push(client, "acme", "Hostname|internet|shared", 5, key)
    twins = [push(client, org, "Hostname|internet|shared", 7 + n, key) for n, org in enumerate(ORGS[1:])]
    # beta's twin was handed out already (popped from its own queue): it is not in the group any more.
    taken = client.post("/queues/boefje-beta/pop").json()
    assert taken["id"] == twins[0]
    keyless = [push(client, org, f"Hostname|internet|{org}-own", 6) for org in ORGS]

    answer = client.post("/schedulers/boefje/pop", params={"limit": 2})
    assert answer.status_code == 200
    popped = [task["id"] for task in answer.json()["results"]]
    # The head (acme's, priority 5) and the next of its group (gamma's, 8): never the keyless tasks at 6.
    assert popped == [original, twins[1]]
    assert statuses(client, [original, *twins]) == ["dispatched", "dispatched", "dispatched", "queued"]
    assert statuses(client, keyless) == ["queued"] * 4

    rest = client.post("/schedulers/boefje/pop", params={"limit": 10}).json()["results"]
    # delta's twin (priority 9) is behind the keyless tasks (6): the head decides, and it has no key.
    assert [task["id"] for task in rest] == [*keyless, twins[2]]


def test_a_keyless_head_pops_as_any_pop_and_a_pop_of_one_takes_one(client: TestClient) -> None:
    organisations(client)
    key = uuid.uuid4()
    head = push(client, "acme", "Hostname|internet|a", 1)
    grouped = [push(client, org, "Hostname|internet|b", 2, key) for org in ("acme", "beta", "gamma")]
    later = push(client, "delta", "Hostname|internet|c", 3)

    one = client.post("/queues/boefje-acme/pop").json()
    assert one["id"] == head
    first = client.post("/queues/boefje-acme/pop").json()  # a pop of one: the head only, its group stays
    assert first["id"] == grouped[0]
    assert statuses(client, grouped[1:]) == ["queued", "queued"]
    # A pop of one queue: the group is looked for across the type, any organisation.
    another = push(client, "acme", "Hostname|internet|d", 2, key)
    answer = client.post("/schedulers/boefje/pop", params={"limit": 5}).json()["results"]
    assert sorted(task["id"] for task in answer) == sorted([*grouped[1:], another])
    assert {task["data"]["deduplication_key"] for task in answer} == {str(key)}
    assert statuses(client, [later]) == ["queued"]


def test_the_pops_filters_apply_to_the_group(client: TestClient) -> None:
    """OpenKAT's runner filters its pops (by image or plugin): the group's other tasks must pass it too."""
    organisations(client)
    key = uuid.uuid4()
    grouped = [push(client, org, "Hostname|internet|f", 2, key) for org in ("acme", "beta")]
    other = {"priority": 2, "data": {**boefje_data("gamma", "Hostname|internet|f", key), "boefje": {"id": "x"}}}
    client.post("/queues/boefje-gamma/push", json=other).raise_for_status()
    body = {"filters": [{"column": "data", "field": "boefje__id", "operator": "eq", "value": "dns-records"}]}
    answer = client.post("/schedulers/boefje/pop", params={"limit": 5}, json=body)
    assert answer.status_code == 200, answer.text
    assert sorted(task["id"] for task in answer.json()["results"]) == sorted(grouped)
    assert [task["organisation"] for task in client.get("/tasks", params={"status": "queued"}).json()["results"]] == [
        "gamma"
    ]


def test_a_group_is_never_handed_out_twice_under_concurrent_pops(store: Store) -> None:
    with store.session() as session:
        for org in ORGS:
            create_organisation(session, org, org, maxsize=0)
    rows = []
    for group in range(60):
        key = uuid.uuid4() if group % 3 else None
        for org in ORGS:
            rows.append((org, f"Hostname|internet|g{group}", group % 5, key))
    ids = seed(store, rows)
    results: list[list[str]] = [[] for _ in range(8)]

    def work(index: int) -> None:
        popper = Store(store.url)
        try:
            while True:
                limit = 2 + index % 3
                with popper.session() as session:
                    target = PopTarget(type="boefje") if index % 2 else PopTarget(queue=f"boefje-{ORGS[index % 4]}")
                    tasks = queues.pop(session, target, limit=limit, now=utcnow(), together=True)
                if not tasks and not index % 2:
                    with popper.session() as session:  # its queue is empty: the rest by type
                        tasks = queues.pop(session, PopTarget(type="boefje"), limit=limit, now=utcnow(), together=True)
                if not tasks:
                    return
                assert len(tasks) <= limit
                head = tasks[0]["data"].get("deduplication_key")
                if head is not None:
                    others = {task["data"].get("deduplication_key") for task in tasks[1:]}
                    assert others <= {head}, "a group took a task of another key"
                results[index].extend(str(task["id"]) for task in tasks)
        finally:
            popper.dispose()

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [task_id for result in results for task_id in result]
    assert len(flat) == len(set(flat)), "a task was handed out twice"
    assert set(flat) == ids, "a task was lost"


def test_concurrent_pops_through_the_queue_door(store: Store) -> None:
    """The API's own queue door (PostgreSQL: its pool; SQLite: inline or its thread)."""
    with store.session() as session:
        for org in ORGS:
            create_organisation(session, org, org, maxsize=0)
    keys = [uuid.uuid4() for _ in range(40)]
    ids = seed(store, [(org, f"Hostname|internet|k{n}", n % 3, key) for n, key in enumerate(keys) for org in ORGS])

    async def main() -> list[list[dict[str, Any]]]:
        executor = QueueDoor(store)
        try:
            answers: list[list[dict[str, Any]]] = []

            async def popper() -> None:
                while True:
                    tasks = await executor.pop(PopRequest(PopTarget(type="boefje"), 3), now=utcnow())
                    if not tasks:
                        return
                    answers.append(tasks)

            await asyncio.gather(*(popper() for _ in range(8)))
            return answers
        finally:
            await executor.close()

    answers = asyncio.run(main())
    flat = [str(task["id"]) for answer in answers for task in answer]
    assert len(flat) == len(set(flat)) and set(flat) == ids
    assert all(len(answer) <= 3 for answer in answers)
    for answer in answers:  # `data` as JSON text, as the API passes it on: every task shares the head's key
        assert len({orjson.loads(task["data"])["deduplication_key"] for task in answer}) == 1
    assert max(len(answer) for answer in answers) == 3  # groups of four were popped three at a time


def seed(store: Store, rows: list[tuple[str, str, int, uuid.UUID | None]]) -> set[str]:
    ids = set()
    with store.session() as session:
        for org in dict.fromkeys(org for org, _, _, _ in rows):
            requests = [
                PushRequest(
                    queue=f"boefje-{org}", priority=priority, data=boefje_data(org, ooi, key), hash=f"{org}|{ooi}"
                )
                for queue_org, ooi, priority, key in rows
                if queue_org == org
            ]
            ids.update(str(result.task["id"]) for result in queues.push_many(session, requests, utcnow()))
    return ids


def test_a_group_is_found_through_its_index(store: Store) -> None:
    """The pop's group uses `ix_tasks_queued_dedup_key` (migration 0013 indexes the very expression
    storage/queues/twins.py queries): a group is an index lookup, not a walk through the queue. Beside
    3,000 keyless queued tasks."""
    with store.session() as session:
        create_organisation(session, "acme", "acme", maxsize=0)
    with store.engine.begin() as conn:  # statistics of an empty table: stale once the queue fills
        conn.exec_driver_sql("ANALYZE tasks")
    seed(store, [("acme", f"Hostname|internet|h{n}", n % 5, None) for n in range(3000)])
    seed(store, [("acme", "Hostname|internet|shared", 3, uuid.uuid4())])
    dialect = store.dialect
    statement = together_statement(PopTarget(type="boefje"), dialect, caps=False, raw_data=True)
    compiled = statement.compile(dialect=dialect_of(dialect))
    params = compiled.construct_params({"type_": "boefje", "limit_": 3, "now_": utcnow(), "receipt_": None})
    args: Any = params if dialect == "postgresql" else [params[name] for name in compiled.positiontup or ()]
    explain = "EXPLAIN" if dialect == "postgresql" else "EXPLAIN QUERY PLAN"
    # SQLite's statistics are whatever an ANALYZE left (Baton runs none; here, an empty table's): it must
    # find the index with stale ones and fresh ones. PostgreSQL's autovacuum keeps statistics; with those
    # of an empty table its choice among indexes is a coin toss over what it takes for no rows.
    for analyze in (False, True) if dialect == "sqlite" else (True,):
        connection = store.engine.raw_connection()
        try:
            cursor = connection.cursor()
            if analyze:
                cursor.execute("ANALYZE tasks")
            cursor.execute(f"{explain} {compiled}", args)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            connection.commit()
        finally:
            connection.close()
        assert "ix_tasks_queued_dedup_key" in plan, plan
        if dialect == "sqlite":  # the chosen tasks looked up by rowid, not the queued ones scanned by status
            assert "SEARCH tasks USING INTEGER PRIMARY KEY" in plan.splitlines()[0], plan
