"""`push_many` against its definition, on both backends: a batch pushed in one go leaves exactly what
pushing its requests one after another in one transaction leaves (the same rows with the same fair
tags, priorities and statuses, the same counters, the same answers, the same error at the same
request), whatever came before. Two databases get the same seeded history of pushes and fair pops by
several organisations of one type; each batch goes in one by one into one and in bulk into the other."""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from baton.core.errors import BatonError
from baton.core.queueing import PopTarget, PushRequest
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.tables import QueueCounter, Task
from tests.conftest import fresh_postgres_database, reset_postgres

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
# Several organisations of one type, with different weights (steps of their clocks).
WEIGHTS = {"a": 1, "b": 2, "c": 3}
ORGS = sorted(WEIGHTS)
PRIORITIES = st.integers(1, 3)
HASHES = st.one_of(st.none(), st.sampled_from(["h0", "h1", "h2", "h3"]))
RULES = st.sampled_from(["reprioritise", "reprioritise", "reprioritise", "refuse"])

single_push = st.tuples(st.just("push"), st.sampled_from(ORGS), PRIORITIES, HASHES)
fair_pop = st.tuples(st.just("pop_type"), st.integers(1, 4))
queue_pop = st.tuples(st.just("pop_queue"), st.sampled_from(ORGS), st.integers(1, 3))
batch = st.tuples(
    st.just("batch"), st.sampled_from(ORGS), st.lists(st.tuples(PRIORITIES, HASHES, RULES), min_size=1, max_size=12)
)
step = st.one_of(single_push, single_push, fair_pop, queue_pop, batch, batch)
maxsizes = st.fixed_dictionaries({org: st.sampled_from([0, 2, 4, 7]) for org in ORGS})

_files = itertools.count()
Fresh = Callable[[], tuple[Store, Store]]


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fresh]:
    """Two empty databases per call: the one-by-one side and the bulk side."""
    if request.param == "sqlite":
        opened: list[Store] = []
        template = tmp_path / "migrated.db"  # migrated once; each example starts from a copy
        migrated = Store(f"sqlite:///{template}")
        migrated.migrate()
        migrated.dispose()

        def sqlite_pair() -> tuple[Store, Store]:
            pair = []
            for _ in range(2):
                path = tmp_path / f"push{next(_files)}.db"
                shutil.copyfile(template, path)
                store = Store(f"sqlite:///{path}")
                opened.append(store)
                pair.append(store)
            return pair[0], pair[1]

        yield sqlite_pair
        for store in opened:
            store.dispose()
        return
    with fresh_postgres_database("push_one") as one_url, fresh_postgres_database("push_bulk") as bulk_url:
        one, bulk = Store(one_url), Store(bulk_url)

        def postgres_pair() -> tuple[Store, Store]:
            reset_postgres(one)
            reset_postgres(bulk)
            return one, bulk

        try:
            yield postgres_pair
        finally:
            one.dispose()
            bulk.dispose()


class History:
    """The same steps on both databases; task ids from one counter, so the two sides match row for row."""

    def __init__(self, one: Store, bulk: Store, maxsize: dict[str, int]) -> None:
        self.one, self.bulk = one, bulk
        self.ids = itertools.count(1)
        for store in (one, bulk):
            with store.session() as session:
                for org in ORGS:
                    create_organisation(session, org, org.upper(), maxsize=maxsize[org], weight=WEIGHTS[org])

    def request(self, org: str, priority: int, digest: str | None, rule: Any = "reprioritise") -> PushRequest:
        task_id = uuid.UUID(int=next(self.ids))
        data = {"n": task_id.int, "hash": digest}
        return PushRequest(f"boefje-{org}", priority, data, hash=digest, task_id=task_id, on_duplicate=rule)

    def everywhere(self, work: Callable[[Session], Any]) -> None:
        answers = []
        for store in (self.one, self.bulk):
            with store.session() as session:
                answers.append(answer(lambda: work(session)))
        assert answers[0] == answers[1]

    def batch(self, requests: list[PushRequest], now: datetime) -> None:
        with self.one.session() as session:
            one_by_one = answer(lambda: [queues.push(session, request, now) for request in requests])
            one_by_one_state = state(session)
        with self.bulk.session() as session:
            together = answer(lambda: queues.push_many(session, requests, now))
            together_state = state(session)
        assert together == one_by_one
        assert together_state == one_by_one_state


# Every pop of both histories carries this receipt (a pop's own is random): the two must agree.
RECEIPT = uuid.UUID(int=7)


def answer(work: Callable[[], Any]) -> Any:
    """What a step returns, or which error it raised with what message (the step's earlier writes stay)."""
    try:
        return work()
    except BatonError as exc:
        return type(exc).__name__, str(exc)


def state(session: Session) -> dict[str, Any]:
    columns = [column for column in Task.__table__.columns if column.key != "seq"]
    tasks = session.execute(select(*columns).order_by(Task.seq)).all()
    counters = session.execute(
        select(
            QueueCounter.scheduler_id,
            func.sum(QueueCounter.queued),
            func.sum(QueueCounter.in_flight),
            func.max(QueueCounter.last_key),
        )
        .group_by(QueueCounter.scheduler_id)
        .order_by(QueueCounter.scheduler_id)
    ).all()
    return {"tasks": [tuple(row) for row in tasks], "counters": [tuple(row) for row in counters]}


# b's backlog at priority `at` runs ahead of a, whose one task (hash h0, tag 0) heads priority 1.
def behind_a_backlog(at: int) -> list[Any]:
    return [("push", "a", 1, "h0"), *[("push", "b", at, f"b{n}") for n in range(5)], ("pop_queue", "b", 3)]


@example(  # the head of priority 1 moves away: the next task there starts at b's backlog, not at 0
    maxsize=dict.fromkeys(ORGS, 0),
    steps=[*behind_a_backlog(1), ("batch", "a", [(2, "h0", "reprioritise"), (1, None, "reprioritise")])],
)
@example(  # a's task moves in ahead of b's backlog at priority 2: the next task there starts at its tag
    maxsize=dict.fromkeys(ORGS, 0),
    steps=[*behind_a_backlog(2), ("batch", "a", [(2, "h0", "reprioritise"), (2, None, "reprioritise")])],
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(maxsize=maxsizes, steps=st.lists(step, min_size=1, max_size=16))
def test_push_many_is_pushing_one_after_another(fresh_pair: Fresh, maxsize: dict[str, int], steps: list[Any]) -> None:
    history = History(*fresh_pair(), maxsize)
    for index, (kind, *args) in enumerate(steps):
        now = NOW + timedelta(seconds=index)  # a twin's `modified_at` tells which push touched it last
        if kind == "push":
            request = history.request(*args)
            history.everywhere(lambda session, request=request, now=now: queues.push(session, request, now))
        elif kind == "pop_type":
            target = PopTarget(type="boefje", fair=True)
            history.everywhere(
                lambda session, target=target, limit=args[0], now=now: queues.pop(
                    session, target, limit=limit, now=now, receipt=RECEIPT
                )
            )
        elif kind == "pop_queue":
            target = PopTarget(queue=f"boefje-{args[0]}")
            history.everywhere(
                lambda session, target=target, limit=args[1], now=now: queues.pop(
                    session, target, limit=limit, now=now, receipt=RECEIPT
                )
            )
        else:
            org, planned = args
            history.batch([history.request(org, priority, digest, rule) for priority, digest, rule in planned], now)
    with history.one.session() as one, history.bulk.session() as bulk:
        assert state(one) == state(bulk)
