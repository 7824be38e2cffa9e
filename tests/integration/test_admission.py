"""The admission rule and the push statements agree, case by case, on both backends.

`baton.core.admission.admit` is the rule. PostgreSQL's one-statement push encodes it in SQL: its raw
answer (outcome 'created' / 'updated' / 'duplicate', or no task) must say what the rule says for the
same queue state. Every push path (a single push, a batch of one) must answer as the rule does."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Connection

from baton.core.admission import Admission, OnDuplicate, admit
from baton.core.errors import BatonError
from baton.core.model import utcnow
from baton.core.queueing import PushRequest, PushResult
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.queues import push_statements
from baton.storage.queues.push import push_params
from baton.storage.tables import Scheduler
from harness.factories import add_organisation, push

QUEUE = "boefje-acme"
MAXSIZE = 2
TWIN = "twin-hash"
CASES = list(itertools.product([True, False], [True, False], [True, False], ["reprioritise", "refuse"]))
# The statement's outcome for each answer of the rule.
STATEMENT_OUTCOME = {
    Admission.CREATE: "created",
    Admission.REPRIORITISE: "updated",
    "DuplicateTaskError": "duplicate",
    "QueueDisabledError": None,
    "QueueFullError": None,
}


def arrange(store: Store, *, enabled: bool, twin: bool, full: bool) -> None:
    """`boefje-acme` (maxsize 2) holding one queued task, two when `full`; one of them has the hash
    TWIN when `twin`; then disabled unless `enabled`."""
    add_organisation(store, "acme", maxsize=MAXSIZE)
    hashes = [TWIN if twin else "other-1", "other-2"][: MAXSIZE if full else 1]
    for task_hash in hashes:
        push(store, QUEUE, task_hash=task_hash)
    with store.session() as session:
        session.get_one(Scheduler, QUEUE).enabled = enabled


def by_the_rule(*, enabled: bool, twin: bool, full: bool, on_duplicate: OnDuplicate) -> tuple[Any, str | None]:
    """(Admission or error class name, error message) as `admit` decides it."""
    try:
        admission = admit(
            QUEUE,
            enabled=enabled,
            maxsize=MAXSIZE,
            queued=MAXSIZE if full else 1,
            twin=twin,
            on_duplicate=on_duplicate,
            task_hash=TWIN,
        )
    except BatonError as exc:
        return type(exc).__name__, str(exc)
    return admission, None


def answered(work: Callable[[], PushResult]) -> tuple[Any, str | None]:
    try:
        result = work()
    except BatonError as exc:
        return type(exc).__name__, str(exc)
    return (Admission.CREATE if result.created else Admission.REPRIORITISE), None


def rolled_back(store: Store, work: Callable[[Connection], Any]) -> Any:
    with store.engine.connect() as conn:
        transaction = conn.begin()
        try:
            return work(conn)
        finally:
            transaction.rollback()


@pytest.mark.parametrize(("enabled", "twin", "full", "on_duplicate"), CASES)
def test_every_push_path_answers_as_the_rule(
    store: Store, enabled: bool, twin: bool, full: bool, on_duplicate: OnDuplicate
) -> None:
    arrange(store, enabled=enabled, twin=twin, full=full)
    expected = by_the_rule(enabled=enabled, twin=twin, full=full, on_duplicate=on_duplicate)
    request = PushRequest(queue=QUEUE, priority=5, data={}, hash=TWIN, on_duplicate=on_duplicate)
    now = utcnow()
    single = rolled_back(store, lambda conn: answered(lambda: queues.push(conn, request, now)))
    batch = rolled_back(store, lambda conn: answered(lambda: queues.push_many(conn, [request], now)[0]))
    assert single == expected
    assert batch == expected


@pytest.mark.parametrize(("enabled", "twin", "full", "on_duplicate"), CASES)
def test_the_postgresql_statement_decides_as_the_rule(
    pg_store: Store, enabled: bool, twin: bool, full: bool, on_duplicate: OnDuplicate
) -> None:
    arrange(pg_store, enabled=enabled, twin=twin, full=full)
    decision, _ = by_the_rule(enabled=enabled, twin=twin, full=full, on_duplicate=on_duplicate)
    request = PushRequest(queue=QUEUE, priority=5, data={}, hash=TWIN, on_duplicate=on_duplicate)
    statement = push_statements.push_postgresql(on_duplicate)
    row = rolled_back(pg_store, lambda conn: conn.execute(statement, push_params(request, utcnow())).one())
    assert (row.enabled, row.maxsize, row.queued) == (enabled, MAXSIZE, MAXSIZE if full else 1)
    assert row.outcome == STATEMENT_OUTCOME[decision]
    assert (row.id is None) == (row.outcome is None)
