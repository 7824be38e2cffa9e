"""Fair pop across organisations: among equal priorities the least-served organisation goes first,
weights give proportional shares, `max_in_flight` caps an organisation, a pop of one queue is
unchanged, and every guarantee of the pop still holds. On both backends."""

from __future__ import annotations

import collections
import itertools
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.core.model import TaskStatus
from baton.storage.engine import Store
from harness.factories import add_organisation, finish, pop, push

_counter = itertools.count()


def fresh_store(base: Store | None, tmp_path: Path, url: str) -> Store:
    """A clean database per hypothesis example (SQLite: a new file; PostgreSQL: the truncated test db)."""
    from tests.conftest import open_store

    if url.startswith("sqlite"):
        return open_store(f"sqlite:///{tmp_path / f'fair{next(_counter)}.db'}")
    return open_store(url)


def shares(popped: list[dict[str, Any]]) -> collections.Counter[str]:
    return collections.Counter(task["organisation"] for task in popped)


def test_a_noisy_organisation_does_not_stall_the_others(store: Store) -> None:
    for org in ("noisy", "quiet1", "quiet2"):
        add_organisation(store, org, maxsize=0)
    for n in range(60):
        push(store, "boefje-noisy", priority=2, data={"n": n})
    for org in ("quiet1", "quiet2"):
        for n in range(3):
            push(store, f"boefje-{org}", priority=2, data={"n": n})
    first = shares(pop(store, task_type="boefje", limit=9))
    assert set(first) == {"noisy", "quiet1", "quiet2"}
    assert max(first.values()) - min(first.values()) <= 1, f"each backlogged organisation gets 1/K: {first}"
    strict = pop(store, task_type="boefje", limit=9, fair=False)
    assert shares(strict) == {"noisy": 9}, "in strict order the oldest backlog goes first"


def test_a_quiet_task_arriving_behind_a_backlog_is_served_within_one_round(store: Store) -> None:
    for org in ("noisy", "quiet"):
        add_organisation(store, org, maxsize=0)
    for n in range(30):
        push(store, "boefje-noisy", priority=2, data={"n": n})
    pop(store, task_type="boefje", limit=10)
    push(store, "boefje-quiet", priority=2, data={})
    assert "quiet" in shares(pop(store, task_type="boefje", limit=2))


def test_a_drained_backlog_leaves_no_debt(store: Store) -> None:
    """An organisation whose earlier backlog was all served starts level with the others, even after
    the tags of its priority started again from nothing (the queue emptied in between)."""
    for org in ("noisy", "quiet"):
        add_organisation(store, org, maxsize=0)
    for n in range(20):
        push(store, "boefje-quiet", priority=2, data={"n": n})
    assert len(pop(store, task_type="boefje", limit=20)) == 20
    for n in range(30):
        push(store, "boefje-noisy", priority=2, data={"n": n})
    push(store, "boefje-quiet", priority=2, data={"late": True})
    assert "quiet" in shares(pop(store, task_type="boefje", limit=2))


def test_a_backlog_at_one_priority_costs_nothing_at_another(store: Store) -> None:
    """Each priority keeps its own fair order: serving an organisation's urgent backlog does not
    put its ordinary tasks behind everybody else's ordinary backlog."""
    for org in ("noisy", "busy"):
        add_organisation(store, org, maxsize=0)
    for n in range(20):
        push(store, "boefje-busy", priority=1, data={"n": n})
        push(store, "boefje-noisy", priority=2, data={"n": n})
        push(store, "boefje-noisy", priority=2, data={"n": n, "again": True})
    assert shares(pop(store, task_type="boefje", limit=20)) == {"busy": 20}
    push(store, "boefje-busy", priority=2, data={"ordinary": True})
    assert "busy" in shares(pop(store, task_type="boefje", limit=2))


def test_priority_still_decides_first(store: Store) -> None:
    add_organisation(store, "a", maxsize=0)
    add_organisation(store, "b", maxsize=0)
    for n in range(5):
        push(store, "boefje-a", priority=1, data={"n": n})
    push(store, "boefje-b", priority=2, data={})
    assert [task["organisation"] for task in pop(store, task_type="boefje", limit=6)] == ["a"] * 5 + ["b"]


def test_weights_give_proportional_shares(store: Store) -> None:
    add_organisation(store, "heavy", maxsize=0, weight=3)
    add_organisation(store, "light", maxsize=0, weight=1)
    for n in range(40):
        push(store, "boefje-heavy", priority=1, data={"n": n})
        push(store, "boefje-light", priority=1, data={"n": n})
    counts = shares(pop(store, task_type="boefje", limit=20))
    assert abs(counts["heavy"] - 15) <= 1 and abs(counts["light"] - 5) <= 1, counts


def test_max_in_flight_skips_an_organisation_at_its_cap_without_failing(store: Store, client: TestClient) -> None:
    add_organisation(store, "capped", maxsize=0)
    add_organisation(store, "free", maxsize=0)
    assert client.patch("/organisations/capped", json={"max_in_flight": 2}).json()["max_in_flight"] == 2
    for n in range(5):
        push(store, "boefje-capped", priority=1, data={"n": n})
        push(store, "boefje-free", priority=1, data={"n": n})

    def pop_one() -> str | None:
        results = client.post("/schedulers/boefje/pop", params={"limit": 1}).json()["results"]
        return results[0]["organisation"] if results else None

    handed = [pop_one() for _ in range(7)]
    assert handed.count("capped") == 2 and handed.count("free") == 5, handed
    assert pop_one() is None, "only the capped organisation has work left: nothing, not an error"
    capped_task = next(
        task
        for task in client.get("/tasks", params={"organisation": "capped", "status": "dispatched"}).json()["results"]
    )
    finish(store, capped_task["id"], TaskStatus.COMPLETED)
    assert pop_one() == "capped", "a completed task frees a place under the cap"
    queue = client.get("/queues/boefje-capped").json()
    assert queue["in_flight"] == 2 and queue["size"] == 2
    assert client.patch("/organisations/capped", json={"max_in_flight": None}).json()["max_in_flight"] is None


def test_a_pop_of_one_queue_is_unchanged(store: Store) -> None:
    add_organisation(store, "acme", maxsize=0)
    for priority, n in [(3, 0), (1, 1), (1, 2), (2, 3)]:
        push(store, "boefje-acme", priority=priority, data={"n": n})
    assert [task["priority"] for task in pop(store, queue="boefje-acme", limit=4)] == [1, 1, 2, 3]


def test_dwell_time_and_in_flight_are_metrics(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    push(store, "boefje-acme", priority=1, data={})
    assert client.post("/schedulers/boefje/pop").json()["results"]
    text = client.get("/metrics").text
    assert 'baton_dwell_seconds_count{organisation="acme",type="boefje"} 1.0' in text
    assert 'baton_in_flight{organisation="acme",type="boefje"} 1.0' in text


backlogs = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.tuples(st.integers(1, 3), st.integers(10, 30)),  # (weight, backlog)
    min_size=2,
    max_size=4,
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(orgs=backlogs, order=st.randoms(use_true_random=False), pops=st.integers(4, 30))
def test_backlogged_organisations_share_pops_by_weight(
    store: Store, tmp_path: Path, database_url: str, orgs: dict[str, tuple[int, int]], order: Any, pops: int
) -> None:
    """While every organisation still has a backlog, their pops divided by their weights differ by at
    most a couple of tasks, whatever order their pushes arrived in (start-time fair queuing's bound)."""
    store = fresh_store(store, tmp_path, database_url)
    try:
        for org, (weight, _) in orgs.items():
            add_organisation(store, org, maxsize=0, weight=weight)
        pushes = [org for org, (_, backlog) in orgs.items() for _ in range(backlog)]
        order.shuffle(pushes)
        for n, org in enumerate(pushes):
            push(store, f"boefje-{org}", priority=1, data={"n": n})
        limit = min(pops, min(backlog for _, backlog in orgs.values()))  # nobody runs dry meanwhile
        served = shares(pop(store, task_type="boefje", limit=limit))
        normalised = {org: served[org] / weight for org, (weight, _) in orgs.items()}
        assert max(normalised.values()) - min(normalised.values()) <= 2.0 + 1e-9, (orgs, served)
        assert sum(served.values()) == limit
    finally:
        store.dispose()
