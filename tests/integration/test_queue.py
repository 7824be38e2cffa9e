"""Queue semantics at the store level, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import uuid

import pytest

from baton.core.errors import ConflictError, NotFoundError
from baton.core.model import TaskStatus
from baton.storage.control.organisations import create_organisation, delete_organisation
from baton.storage.engine import Store
from tests import queue_api as queue


def make_org(store: Store, org: str = "acme", maxsize: int = 100) -> None:
    with store.session() as session:
        create_organisation(session, org, org.title(), maxsize)


def push(
    store: Store, priority: int, task_hash: str | None = None, queue_id: str = "boefje-acme", **data: int
) -> queue.PushResult:
    with store.session() as session:
        return queue.push(session, queue_id, priority=priority, data=dict(data), task_hash=task_hash)


def pop_one(store: Store, queue_id: str = "boefje-acme") -> queue.Task | None:
    with store.session() as session:
        popped = queue.pop(session, scheduler_id=queue_id)
        return popped[0] if popped else None


def test_lower_priority_pops_first_and_ties_pop_oldest_first(store: Store) -> None:
    make_org(store)
    for n, priority in enumerate([5, 1, 3, 1, 5, 1]):
        push(store, priority, n=n)
    order = []
    while (task := pop_one(store)) is not None:
        order.append((task.priority, task.data["n"]))
    assert order == [(1, 1), (1, 3), (1, 5), (3, 2), (5, 0), (5, 4)]


def test_pop_marks_dispatched_and_empty_queue_pops_nothing(store: Store) -> None:
    make_org(store)
    assert pop_one(store) is None
    pushed = push(store, 1).task
    popped = pop_one(store)
    assert popped is not None and popped.id == pushed.id
    assert popped.status == TaskStatus.DISPATCHED.value
    assert pop_one(store) is None


def test_queues_are_separate(store: Store) -> None:
    make_org(store)
    make_org(store, "other")
    push(store, 1, queue_id="boefje-other")
    assert pop_one(store, "boefje-acme") is None
    assert pop_one(store, "normalizer-other") is None
    assert pop_one(store, "boefje-other") is not None


def test_same_hash_while_queued_updates_priority_instead_of_duplicating(store: Store) -> None:
    make_org(store)
    first = push(store, 5, "h1", n=1)
    second = push(store, 2, "h1", n=2)
    assert first.created and not second.created
    assert second.task.id == first.task.id
    assert second.task.priority == 2
    assert second.task.data == {"n": 1}  # the queued task keeps its data
    with store.session() as session:
        assert queue.queue_size(session, "boefje-acme") == 1


def test_same_hash_after_pop_queues_a_new_task(store: Store) -> None:
    make_org(store)
    first = push(store, 5, "h1")
    assert pop_one(store) is not None
    again = push(store, 5, "h1")
    assert again.created and again.task.id != first.task.id


def test_same_hash_in_other_queue_is_independent(store: Store) -> None:
    make_org(store)
    assert push(store, 1, "h1").created
    assert push(store, 1, "h1", queue_id="normalizer-acme").created


def test_maxsize_refuses_new_tasks_but_accepts_updates_of_queued_twins(store: Store) -> None:
    make_org(store, maxsize=3)
    for n in range(3):
        push(store, 1, f"h{n}")
    with pytest.raises(queue.QueueFullError):
        push(store, 1, "new")
    with pytest.raises(queue.QueueFullError):
        push(store, 1)
    updated = push(store, 0, "h1")
    assert not updated.created and updated.task.priority == 0
    assert pop_one(store) is not None
    assert push(store, 1, "new").created


def test_unknown_queue(store: Store) -> None:
    with pytest.raises(NotFoundError, match="boefje-nope"):
        push(store, 1, queue_id="boefje-nope")


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ([TaskStatus.DISPATCHED, TaskStatus.RUNNING, TaskStatus.COMPLETED], True),
        ([TaskStatus.DISPATCHED, TaskStatus.RUNNING, TaskStatus.FAILED], True),
        ([TaskStatus.DISPATCHED, TaskStatus.FAILED], True),
        ([TaskStatus.DISPATCHED, TaskStatus.CANCELLED], True),
        ([TaskStatus.CANCELLED], True),
        ([TaskStatus.RUNNING], False),
        ([TaskStatus.COMPLETED], False),
        ([TaskStatus.DISPATCHED, TaskStatus.RUNNING, TaskStatus.CANCELLED], False),
        ([TaskStatus.DISPATCHED, TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.RUNNING], False),
        ([TaskStatus.CANCELLED, TaskStatus.QUEUED], False),
    ],
)
def test_lifecycle_transitions(store: Store, path: list[TaskStatus], allowed: bool) -> None:
    make_org(store)
    task_id = push(store, 1).task.id
    *legal, last = path
    for status in legal:
        with store.session() as session:
            queue.change_status(session, task_id, status)
    with store.session() as session:
        if allowed:
            assert queue.change_status(session, task_id, last).status == last.value
        else:
            current = queue.get_task(session, task_id).status
            with pytest.raises(queue.InvalidTransitionError) as info:
                queue.change_status(session, task_id, last)
            assert f"'{current}'" in str(info.value) and f"'{last.value}'" in str(info.value)


def test_cancelled_task_is_not_popped(store: Store) -> None:
    make_org(store)
    task_id = push(store, 1).task.id
    with store.session() as session:
        queue.change_status(session, task_id, TaskStatus.CANCELLED)
    assert pop_one(store) is None


def test_unknown_task(store: Store) -> None:
    with store.session() as session, pytest.raises(NotFoundError):
        queue.get_task(session, uuid.uuid4())


def test_list_tasks_filters_and_pages(store: Store) -> None:
    make_org(store)
    for n in range(5):
        push(store, n, n=n)
    pop_one(store)
    with store.session() as session:
        count, rows = queue.list_tasks(session, scheduler_id="boefje-acme", status=TaskStatus.QUEUED, limit=2)
        assert count == 4 and len(rows) == 2
        count, rows = queue.list_tasks(session, scheduler_id="boefje-acme", limit=10, offset=4)
        assert count == 5 and len(rows) == 1


def test_duplicate_organisation_and_cascading_delete(store: Store) -> None:
    make_org(store)
    push(store, 1)
    with pytest.raises(ConflictError):
        make_org(store)
    with store.session() as session:
        delete_organisation(session, "acme")
    with store.session() as session:
        assert queue.list_tasks(session)[0] == 0
        with pytest.raises(NotFoundError):
            delete_organisation(session, "acme")
