"""The plain pop is answered before FastAPI's routing (api/fastpath.py): its answers must be exactly
the routes' answers, and whatever it does not take (a body, an odd query, an unknown queue, a token
it cannot vouch for) must still get the routes' own answer."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from baton.api.fastpath import pop_limit
from baton.storage.engine import Store
from baton.testing.factories import add_organisation, push

ALL_KEYS = {
    "id",
    "queue",
    "scheduler_id",
    "schedule_id",
    "organisation",
    "type",
    "priority",
    "status",
    "hash",
    "data",
    "attempts",
    "reason",
    "created_at",
    "modified_at",
}


def without_identity(task: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in task.items() if key not in ("id", "created_at", "modified_at", "data")}


@pytest.mark.parametrize("query", [b"", b"limit=1", b"limit=1000"])
def test_plain_limits_are_taken(query: bytes) -> None:
    assert pop_limit(query) is not None


@pytest.mark.parametrize("query", [b"limit=0", b"limit=1001", b"limit=x", b"limit=1&limit=2", b"lmit=1", b"limit="])
def test_anything_else_is_left_to_the_route(query: bytes) -> None:
    assert pop_limit(query) is None


def test_the_fast_answer_is_the_routes_answer(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    for n in range(6):
        push(store, "boefje-acme", priority=1, data={"n": n})
    fast = client.post("/queues/boefje-acme/pop")
    routed = client.post("/queues/boefje-acme/pop", json={})  # a body: FastAPI's route answers
    assert fast.status_code == routed.status_code == 200
    assert fast.headers["content-type"] == routed.headers["content-type"] == "application/json"
    assert fast.headers["x-request-id"] and routed.headers["x-request-id"]
    assert set(fast.json()) == set(routed.json()) == ALL_KEYS
    assert without_identity(fast.json()) == without_identity(routed.json())
    assert fast.json()["status"] == "dispatched" and fast.json()["data"]["n"] == 0

    fast_many = client.post("/schedulers/boefje/pop", params={"limit": 2}).json()["results"]
    routed_many = client.post("/schedulers/boefje/pop", params={"limit": 2}, json={}).json()["results"]
    assert [without_identity(task) for task in fast_many] == [without_identity(task) for task in routed_many]
    assert [task["scheduler_id"] for task in fast_many] == ["boefje", "boefje"]


def test_what_the_fast_path_leaves_gets_the_routes_answers(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    assert client.post("/queues/boefje-acme/pop").json() is None
    assert client.post("/schedulers/boefje/pop").json() == {"results": []}
    unknown = client.post("/queues/boefje-nobody/pop")
    assert unknown.status_code == 404 and "boefje-nobody" in unknown.json()["message"]
    assert client.post("/schedulers/boefje-nobody/pop").status_code == 404
    assert client.post("/schedulers/boefje/pop", params={"limit": 0}).status_code == 422
    assert client.post("/queues/boefje-acme/pop", params={"limit": 1}).status_code == 422  # not a parameter here
    assert client.get("/queues/boefje-acme/pop").status_code == 405
