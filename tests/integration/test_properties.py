"""Property tests (hypothesis): the queue behaves like a simple model under any sequence of operations."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.core.model import TaskStatus
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from tests import queue_api as queue

operation = st.one_of(
    st.tuples(st.just("push"), st.integers(-3, 3), st.one_of(st.none(), st.sampled_from("abcde"))),
    st.tuples(st.just("pop"), st.integers(1, 3), st.none()),
    st.tuples(st.just("finish"), st.sampled_from([TaskStatus.COMPLETED, TaskStatus.FAILED]), st.none()),
)
_counter = itertools.count()


def fresh_store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / f'p{next(_counter)}.db'}")
    store.migrate()
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=8)
    return store


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, max_size=40))
def test_queue_matches_a_reference_model(tmp_path: Path, ops: list[tuple[str, Any, Any]]) -> None:
    store = fresh_store(tmp_path)
    model: list[dict[str, Any]] = []  # queued tasks: {"id", "priority", "seq", "hash"}
    dispatched: list[str] = []
    handed_out: set[str] = set()
    seq = 0
    try:
        for kind, arg, task_hash in ops:
            with store.session() as session:
                if kind == "push":
                    twin = next((t for t in model if task_hash is not None and t["hash"] == task_hash), None)
                    if twin is None and len(model) >= 8:
                        try:
                            queue.push(session, "boefje-acme", priority=arg, data={}, task_hash=task_hash)
                        except queue.QueueFullError:
                            continue
                        raise AssertionError("push beyond maxsize was accepted")
                    result = queue.push(session, "boefje-acme", priority=arg, data={}, task_hash=task_hash)
                    if twin is not None:
                        assert not result.created and str(result.task.id) == twin["id"]
                        twin["priority"] = arg
                    else:
                        assert result.created
                        seq += 1
                        model.append({"id": str(result.task.id), "priority": arg, "seq": seq, "hash": task_hash})
                elif kind == "pop":
                    popped = [str(task.id) for task in queue.pop(session, scheduler_id="boefje-acme", limit=arg)]
                    model.sort(key=lambda t: (t["priority"], t["seq"]))
                    expected = [t["id"] for t in model[:arg]]
                    assert popped == expected
                    assert not handed_out & set(popped), "a task was handed out twice"
                    handed_out.update(popped)
                    dispatched.extend(popped)
                    del model[: len(popped)]
                elif dispatched:
                    task_id = dispatched.pop(0)
                    queue.change_status(session, uuid.UUID(task_id), arg)
        with store.session() as session:
            assert queue.queue_size(session, "boefje-acme") == len(model)
    finally:
        store.dispose()
