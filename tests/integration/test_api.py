"""The HTTP contract, row by row, through FastAPI's test client, on both backends."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient


def create_org(client: TestClient, org: str = "acme") -> None:
    response = client.post("/organisations", json={"id": org, "name": org.title()})
    assert response.status_code == 201, response.text


def push(client: TestClient, priority: int = 1, queue_id: str = "boefje-acme", **extra: Any) -> Any:
    return client.post(f"/queues/{queue_id}/push", json={"priority": priority, "data": {"x": 1}, **extra})


def test_health(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    assert client.get("/ready").json()["status"] == "ready"


def test_organisations_create_list_delete(client: TestClient) -> None:
    create_org(client)
    duplicate = client.post("/organisations", json={"id": "acme", "name": "Again"})
    assert duplicate.status_code == 409 and "acme" in duplicate.json()["message"]
    assert [org["id"] for org in client.get("/organisations").json()] == ["acme"]
    queues = {queue["id"] for queue in client.get("/queues").json()}
    assert queues == {"boefje-acme", "normalizer-acme", "report-acme"}
    assert client.delete("/organisations/acme").status_code == 204
    assert client.get("/organisations").json() == []
    assert client.get("/queues").json() == []
    missing = client.delete("/organisations/acme")
    assert missing.status_code == 404 and "acme" in missing.json()["message"]


def test_organisation_id_is_validated(client: TestClient) -> None:
    response = client.post("/organisations", json={"id": "no spaces/allowed", "name": "x"})
    assert response.status_code == 422 and "id" in response.json()["message"]
    response = client.post("/organisations", json={"id": "ok"})
    assert response.status_code == 422 and "name" in response.json()["message"]


def test_queue_read_and_unknown_queue(client: TestClient) -> None:
    create_org(client)
    push(client)
    queue = client.get("/queues/boefje-acme").json()
    assert queue == {
        "id": "boefje-acme",
        "organisation": "acme",
        "type": "boefje",
        "size": 1,
        "in_flight": 0,
        "maxsize": 50,
        "enabled": True,
    }
    for response in (
        client.get("/queues/boefje-nope"),
        push(client, queue_id="boefje-nope"),
        client.post("/queues/boefje-nope/pop"),
    ):
        assert response.status_code == 404 and "boefje-nope" in response.json()["message"]


def test_push_pop_and_dedup(client: TestClient) -> None:
    create_org(client)
    first = push(client, 5, hash="abc")
    assert first.status_code == 201
    again = push(client, 2, hash="abc")
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again.json()["priority"] == 2
    popped = client.post("/queues/boefje-acme/pop")
    assert popped.status_code == 200
    task = popped.json()
    assert task["status"] == "dispatched" and task["id"] == first.json()["id"]
    assert set(task) >= {
        "id",
        "scheduler_id",
        "organisation",
        "type",
        "priority",
        "status",
        "hash",
        "data",
        "created_at",
        "modified_at",
    }
    empty = client.post("/queues/boefje-acme/pop")
    assert empty.status_code == 200 and empty.json() is None


def test_push_rejects_bad_bodies_naming_the_field(client: TestClient) -> None:
    create_org(client)
    cases = [
        ({"priority": "high", "data": {}}, "priority"),
        ({"data": {}}, "priority"),
        ({"priority": 1}, "data"),
        ({"priority": 1, "data": [1, 2]}, "data"),
        ({"priority": 1, "data": {}, "hash": ""}, "hash"),
        ({"priority": 2**40, "data": {}}, "priority"),
        ({"priority": 1, "data": {}, "bogus": True}, "bogus"),
    ]
    for body, field in cases:
        response = client.post("/queues/boefje-acme/push", json=body)
        assert response.status_code == 422, body
        assert field in response.json()["message"], (body, response.json())
    not_json = client.post("/queues/boefje-acme/push", content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 422


def test_push_to_full_queue_answers_429(client: TestClient) -> None:
    create_org(client)
    for n in range(50):
        assert push(client, n, hash=f"h{n}").status_code == 201
    full = push(client, 1)
    assert full.status_code == 429 and "full" in full.json()["message"]
    assert push(client, 0, hash="h3").status_code == 200


def test_oversized_data_answers_413(client: TestClient) -> None:
    create_org(client)
    response = client.post("/queues/boefje-acme/push", json={"priority": 1, "data": {"blob": "x" * 70_000}})
    assert response.status_code == 413 and "data" in response.json()["message"]


def test_task_lifecycle_over_http(client: TestClient) -> None:
    create_org(client)
    task_id = push(client).json()["id"]
    assert client.get(f"/tasks/{task_id}").json()["status"] == "queued"
    client.post("/queues/boefje-acme/pop")
    running = client.patch(f"/tasks/{task_id}", json={"status": "running"})
    assert running.status_code == 200 and running.json()["status"] == "running"
    done = client.patch(f"/tasks/{task_id}", json={"status": "completed"})
    assert done.status_code == 200
    illegal = client.patch(f"/tasks/{task_id}", json={"status": "running"})
    assert illegal.status_code == 409
    assert "'completed'" in illegal.json()["message"] and "'running'" in illegal.json()["message"]
    bad = client.patch(f"/tasks/{task_id}", json={"status": "sleeping"})
    assert bad.status_code == 422 and "status" in bad.json()["message"]


def test_reading_a_task_answers_what_its_push_and_patch_answered(client: TestClient) -> None:
    """GET /tasks/{id} reads the row as the PATCH writes it (the executor's statement): the same
    document, OpenKAT's shape, nested data intact."""
    create_org(client)
    data = {"boefje": {"id": "dns-records", "version": None}, "input_ooi": "Hostname|internet|a.example", "n": [1, 2]}
    pushed = client.post("/queues/boefje-acme/push", json={"priority": 3, "data": data, "hash": "h-read"}).json()
    read = client.get(f"/tasks/{pushed['id']}")
    assert read.status_code == 200
    assert read.json() == {**pushed, "scheduler_id": "boefje"}
    assert read.json()["data"] == data
    client.post("/queues/boefje-acme/pop")
    running = client.patch(f"/tasks/{pushed['id']}", json={"status": "running"}).json()
    assert client.get(f"/tasks/{pushed['id']}").json() == running


def test_unknown_and_malformed_task_ids(client: TestClient) -> None:
    missing = uuid.uuid4()
    unknown = client.get(f"/tasks/{missing}")
    assert unknown.status_code == 404 and str(missing) in unknown.json()["message"]
    assert client.patch(f"/tasks/{missing}", json={"status": "running"}).status_code == 404
    malformed = client.get("/tasks/not-a-uuid")
    assert malformed.status_code == 422 and "task_id" in malformed.json()["message"]


def test_list_tasks(client: TestClient) -> None:
    create_org(client)
    create_org(client, "other")
    for _ in range(3):
        push(client)
    push(client, queue_id="normalizer-other")
    client.post("/queues/boefje-acme/pop")
    listing = client.get("/tasks", params={"scheduler_id": "boefje-acme", "status": "queued"}).json()
    assert listing["count"] == 2 and len(listing["results"]) == 2
    page = client.get("/tasks", params={"limit": 1, "offset": 1}).json()
    assert page["count"] == 4 and len(page["results"]) == 1
    counted = client.get("/tasks", params={"limit": 0}).json()  # OpenKAT's web UI asks for the count so
    assert counted["count"] == 4 and counted["results"] == []
    too_many = client.get("/tasks", params={"limit": 100_000})
    assert too_many.status_code == 422 and "limit" in too_many.json()["message"]
    assert client.get("/tasks", params={"status": "nonsense"}).status_code == 422


def test_schedulers_listing_and_toggle(client: TestClient) -> None:
    create_org(client)
    schedulers = client.get("/schedulers").json()
    assert {row["id"] for row in schedulers} == {"boefje-acme", "normalizer-acme", "report-acme"}
    disabled = client.patch("/schedulers/boefje-acme", json={"enabled": False})
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False
    refused = push(client)
    assert refused.status_code == 409 and "disabled" in refused.json()["message"]
    assert client.get("/schedulers/boefje-nope").status_code == 404


def test_metrics_exposes_queue_depth_and_counters(client: TestClient) -> None:
    create_org(client)
    push(client)
    push(client)
    client.post("/queues/boefje-acme/pop")
    text = client.get("/metrics").text
    assert 'baton_queue_depth{queue="boefje-acme"} 1.0' in text
    assert 'baton_pops_total{queue="boefje-acme"} 1.0' in text
    assert "baton_pop_latency_seconds_bucket" in text


def test_openapi_docs_are_served(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert "/queues/{queue_id}/pop" in paths and "/tasks/{task_id}" in paths
