"""The API's queue door on SQLite runs pop statements built once per shape (`queue_door.PopStatement`):
it must hand out exactly what a pop statement built afresh for each call hands out, in the same order,
for every kind of pop."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from baton.core.model import utcnow
from baton.core.queueing import PopRequest, PopShape, PopTarget
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.queues.door import QueueDoor
from baton.storage.queues.pops import build_pop
from harness.factories import add_organisation, push

TARGETS = [
    PopTarget(queue="boefje-acme"),
    PopTarget(type="boefje", fair=True),
    PopTarget(type="boefje", fair=False),
]


def filled(path: Path) -> Store:
    store = Store(f"sqlite:///{path}")
    store.migrate()
    add_organisation(store, "acme", maxsize=0)
    add_organisation(store, "beta", maxsize=0, weight=3)
    for n in range(30):
        queue = "boefje-acme" if n % 3 else "boefje-beta"
        push(store, queue, priority=n % 4, data={"n": n}, task_id=uuid.UUID(int=n + 1))
    return store


def popped_by_executor(store: Store, target: PopTarget, limit: int, caps: bool) -> list[list[Any]]:
    async def drain() -> list[list[Any]]:
        executor = QueueDoor(store, deduplicate=False)
        rounds = []
        try:
            while tasks := await executor.pop(PopRequest(target, limit), now=utcnow(), caps=caps):
                rounds.append([task["id"] for task in tasks])
        finally:
            await executor.close()
        return rounds

    return asyncio.run(drain())


def popped_by_fresh_statements(store: Store, target: PopTarget, limit: int, caps: bool) -> list[list[Any]]:
    rounds = []
    while True:
        with store.engine.begin() as conn:
            shape = PopShape(together=False, by_queue=target.queue is not None, fair=target.fair, caps=caps)
            statement = build_pop(shape, "sqlite", raw_data=True)  # built for this call
            tasks = queues.run_pop(conn, statement, target, limit=limit, now=utcnow())
        if not tasks:
            return rounds
        rounds.append([task["id"] for task in tasks])


# Caps apply to pops by type only.
CASES = [
    pytest.param(target, limit, caps, id=f"{name}-limit{limit}-{'caps' if caps else 'nocaps'}")
    for target, name in zip(TARGETS, ["queue", "type-fair", "type-strict"], strict=True)
    for limit in (1, 4)
    for caps in (False, True)
    if not (caps and target.queue is not None)
]


@pytest.mark.parametrize(("target", "limit", "caps"), CASES)
def test_the_executor_pops_what_the_store_level_pop_pops(
    tmp_path: Path, target: PopTarget, limit: int, caps: bool
) -> None:
    api, reference = filled(tmp_path / "api.db"), filled(tmp_path / "reference.db")
    try:
        by_executor = popped_by_executor(api, target, limit, caps)
        assert by_executor == popped_by_fresh_statements(reference, target, limit, caps)
        assert sum(len(ids) for ids in by_executor) == (20 if target.queue else 30)
    finally:
        api.dispose()
        reference.dispose()
