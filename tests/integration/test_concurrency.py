"""Concurrent pops never hand out one task twice and never lose one."""

from __future__ import annotations

import multiprocessing
import threading
import uuid

from baton.storage.engine import Store
from baton.storage.organisations import create_organisation
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
