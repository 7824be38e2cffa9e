"""OpenKAT-compatible endpoints, exercised by a job-runner client written from the issue's description."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from baton.storage.engine import Store
from baton.testing.servers import api_replicas


class JobRunnerClient:
    """What an OpenKAT boefje/normalizer runner does: pop with filters, run, patch, push follow-ups."""

    def __init__(self, http: httpx.Client | TestClient) -> None:
        self.http = http

    def pop(self, scheduler: str, limit: int = 1, filters: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        response = self.http.post(
            f"/schedulers/{scheduler}/pop",
            params={"limit": limit},
            json={"filters": filters} if filters else None,
        )
        response.raise_for_status()
        results: list[dict[str, Any]] = response.json()["results"]
        return results

    def patch(self, task_id: str, status: str) -> None:
        self.http.patch(f"/tasks/{task_id}", json={"status": status}).raise_for_status()

    def push(self, scheduler: str, task: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(f"/schedulers/{scheduler}/push", json=task)
        response.raise_for_status()
        pushed: dict[str, Any] = response.json()
        return pushed


def boefje_task(org: str, boefje: str, ooi: str, priority: int = 1) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "scheduler_id": "boefje",
        "schedule_id": None,
        "organisation": org,
        "priority": priority,
        "status": "queued",
        "type": "boefje",
        "hash": f"{boefje}|{ooi}|{org}",
        "data": {"boefje": {"id": boefje, "oci_image": f"img/{boefje}"}, "input_ooi": ooi, "organization": org},
        "created_at": "2026-01-01T00:00:00Z",
        "modified_at": "2026-01-01T00:00:00Z",
    }


@pytest.fixture
def orgs(client: TestClient) -> TestClient:
    for org in ("acme", "beta"):
        client.post("/organisations", json={"id": org, "name": org})
    return client


def test_runner_end_to_end(orgs: TestClient) -> None:
    runner = JobRunnerClient(orgs)
    pushed = runner.push("boefje", boefje_task("acme", "dns", "Hostname|internet|a", priority=5))
    assert pushed["scheduler_id"] == "boefje-acme" and pushed["status"] == "queued"
    runner.push("boefje", boefje_task("beta", "nmap", "IP|1", priority=1))
    runner.push("boefje", boefje_task("beta", "dns", "Hostname|internet|b", priority=3))
    assert set(pushed) >= {
        "id",
        "scheduler_id",
        "schedule_id",
        "organisation",
        "priority",
        "status",
        "type",
        "hash",
        "data",
        "created_at",
        "modified_at",
    }

    only_dns = runner.pop(
        "boefje",
        limit=10,
        filters=[{"column": "data", "field": "boefje__oci_image", "operator": "in", "value": ["img/dns"]}],
    )
    assert [task["priority"] for task in only_dns] == [3, 5]  # across organisations, best first
    for task in only_dns:
        runner.patch(task["id"], "running")
        runner.push(
            "normalizer",
            {
                "organisation": task["organisation"],
                "scheduler_id": "normalizer",
                "data": {"normalizer": {"id": "kat_dns"}, "raw_data": {"boefje_meta": {"id": task["id"]}}},
            },
        )
        runner.patch(task["id"], "completed")
        assert orgs.get(f"/tasks/{task['id']}").json()["status"] == "completed"

    normalizer_tasks = runner.pop("normalizer", limit=5)
    assert {task["organisation"] for task in normalizer_tasks} == {"acme", "beta"}
    remaining = runner.pop("boefje", limit=5)
    assert [task["data"]["boefje"]["id"] for task in remaining] == ["nmap"]
    assert runner.pop("boefje") == []


def test_pop_from_one_queue_and_limits(orgs: TestClient) -> None:
    runner = JobRunnerClient(orgs)
    for n in range(4):
        runner.push("boefje", boefje_task("acme", f"b{n}", "x"))
    runner.push("boefje", boefje_task("beta", "other", "x"))
    assert len(runner.pop("boefje-acme", limit=3)) == 3
    assert [task["organisation"] for task in runner.pop("boefje-acme", limit=3)] == ["acme"]
    assert orgs.post("/schedulers/boefje/pop", params={"limit": 0}).status_code == 422
    assert orgs.post("/schedulers/boefje-ghost/pop").status_code == 404


def test_push_errors(orgs: TestClient) -> None:
    task = boefje_task("acme", "dns", "x")
    mismatch = orgs.post("/schedulers/normalizer/push", json=task)
    assert mismatch.status_code == 400 and "scheduler_id" in mismatch.json()["message"]
    wrong_org = orgs.post("/schedulers/boefje-beta/push", json={**task, "scheduler_id": "boefje-beta"})
    assert wrong_org.status_code == 400 and "organisation" in wrong_org.json()["message"]
    ghost = orgs.post("/schedulers/boefje/push", json={**task, "organisation": "ghost"})
    assert ghost.status_code == 404
    assert orgs.post("/schedulers/boefje/push", json=task).status_code == 201
    reused_id = orgs.post("/schedulers/boefje/push", json={**task, "hash": "other"})
    assert reused_id.status_code == 409
    no_data = orgs.post("/schedulers/boefje/push", json={"organisation": "acme"})
    assert no_data.status_code == 422 and "data" in no_data.json()["message"]


def test_bad_filter_answers_422_naming_it(orgs: TestClient) -> None:
    response = orgs.post("/schedulers/boefje/pop", json={"filters": [{"column": "nope", "operator": "eq", "value": 1}]})
    assert response.status_code == 422 and "nope" in response.json()["message"]
    response = orgs.post(
        "/schedulers/boefje/pop", json={"filters": [{"column": "data", "field": "a", "operator": "near", "value": 1}]}
    )
    assert response.status_code == 422 and "near" in response.json()["message"]


@pytest.fixture
def two_api_replicas(pg_store: Store) -> Iterator[list[str]]:
    with api_replicas(pg_store.url, 2) as urls:
        yield urls


def test_concurrent_limit_pops_across_two_api_replicas_never_overlap(two_api_replicas: list[str]) -> None:
    first = httpx.Client(base_url=two_api_replicas[0])
    first.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
    first.post("/organisations", json={"id": "beta", "name": "Beta"}).raise_for_status()
    expected = set()
    for n in range(300):
        task = JobRunnerClient(first).push("boefje", boefje_task("acme" if n % 2 else "beta", "dns", f"obj{n}"))
        expected.add(task["id"])
    popped: list[list[str]] = [[] for _ in range(8)]

    def work(index: int) -> None:
        with httpx.Client(base_url=two_api_replicas[index % 2], timeout=30) as http:
            runner = JobRunnerClient(http)
            while batch := runner.pop("boefje", limit=5):
                popped[index].extend(task["id"] for task in batch)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [task_id for ids in popped for task_id in ids]
    assert len(flat) == len(set(flat)), "a task was handed out twice"
    assert set(flat) == expected
    assert sum(1 for ids in popped if ids) > 1
