"""Concurrent pops never hand out one task twice and never lose one."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import uuid
from typing import Any

from baton.core.model import utcnow
from baton.core.queueing import PopRequest, PopTarget
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues.door import QueueDoor
from baton.storage.tables import Task
from tests import queue_api as queue

TASKS = 2000
WORKERS = 8


def fill_queue(store: Store, count: int = TASKS) -> set[str]:
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=0)
    with store.session() as session:
        session.add_all(
            Task(
                id=uuid.uuid4(),
                scheduler_id="boefje-acme",
                organisation="acme",
                type="boefje",
                priority=n % 7,
                data={"n": n},
            )
            for n in range(count)
        )
    with store.session() as session:
        return {str(task.id) for task in session.query(Task).all()}


def drain(url: str, batch: int) -> list[str]:
    store = Store(url)
    popped: list[str] = []
    try:
        while True:
            with store.session() as session:
                tasks = queue.pop(session, scheduler_id="boefje-acme", limit=batch)
                if not tasks:
                    return popped
                popped.extend(str(task.id) for task in tasks)
    finally:
        store.dispose()


def assert_each_popped_once(expected: set[str], results: list[list[str]]) -> None:
    flat = [task_id for result in results for task_id in result]
    assert len(flat) == len(set(flat)), "a task was handed out twice"
    assert set(flat) == expected, "a task was lost"
    assert sum(1 for result in results if result) > 1, "the work was not shared between workers"


def test_eight_processes_pop_each_task_exactly_once_on_postgres(pg_store: Store) -> None:
    expected = fill_queue(pg_store)
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS) as pool:
        results = pool.starmap(drain, [(pg_store.url, 1 + worker % 3) for worker in range(WORKERS)])
    assert_each_popped_once(expected, results)


def test_eight_threads_pop_each_task_exactly_once(store: Store) -> None:
    expected = fill_queue(store, 600)
    results: list[list[str]] = [[] for _ in range(WORKERS)]

    def work(index: int) -> None:
        results[index] = drain(store.url, 1 + index % 3)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert_each_popped_once(expected, results)


def test_concurrent_pushes_of_one_hash_create_one_task(store: Store) -> None:
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=0)
    created: list[bool] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(20):
            with store.session() as session:
                result = queue.push(session, "boefje-acme", priority=1, data={}, task_hash="same")
            with lock:
                created.append(result.created)

    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert created.count(True) == 1
    with store.session() as session:
        assert queue.queue_size(session, "boefje-acme") == 1


def popped_ids(results: list[list[dict[str, Any]]]) -> list[str]:
    return [str(row["id"]) for rows in results for row in rows]


def test_concurrent_pops_of_one_api_process_share_statements_and_hand_each_task_out_once(pg_store: Store) -> None:
    """The group pop (storage/queues/popbatch.py) on PostgreSQL: 300 pops at once, two API processes' queue
    doors side by side, 200 tasks: every task goes to exactly one pop, in hand-out order per door, and
    each door sent far fewer statements than it served pops."""
    expected = fill_queue(pg_store, 200)
    executors = [QueueDoor(pg_store), QueueDoor(pg_store)]
    target = PopTarget(queue="boefje-acme")

    async def pop_all() -> list[list[list[dict[str, Any]]]]:
        try:
            waves = [
                asyncio.gather(*(executor.pop(PopRequest(target), now=utcnow()) for _ in range(150)))
                for executor in executors
            ]
            return [list(wave) for wave in await asyncio.gather(*waves)]
        finally:
            for executor in executors:
                await executor.close()

    per_executor = asyncio.run(pop_all())
    everything = popped_ids([rows for results in per_executor for rows in results])
    assert len(everything) == len(set(everything)), "a task was handed out twice"
    assert set(everything) == expected, "a task was lost"
    for executor, results in zip(executors, per_executor, strict=True):
        assert all(len(rows) <= 1 for rows in results), "a pop of one task got more"
        keys = [(row["priority"], row["seq"]) for rows in results for row in rows]
        assert keys == sorted(keys), "an executor's pops were not served in hand-out order"
        assert executor.batcher is not None
        assert executor.batcher.statements_sent < 20, "concurrent pops did not share statements"


def test_without_group_pops_each_pop_is_its_own_statement(pg_store: Store) -> None:
    expected = fill_queue(pg_store, 40)
    executor = QueueDoor(pg_store, group_pops=False)
    target = PopTarget(type="boefje", fair=True)

    async def pop_all() -> list[list[dict[str, Any]]]:
        try:
            return list(await asyncio.gather(*(executor.pop(PopRequest(target), now=utcnow()) for _ in range(50))))
        finally:
            await executor.close()

    results = asyncio.run(pop_all())
    assert executor.batcher is None
    ids = popped_ids(results)
    assert len(ids) == len(set(ids)) and set(ids) == expected
