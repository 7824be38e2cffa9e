"""The plain pop and push are answered before FastAPI's routing (api/fastpath.py): their answers must
be exactly the routes' answers, and whatever the fast path does not take (a body, an odd query, an
invalid push, a token it cannot vouch for) must still get the routes' own answer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from baton.api import fastpath
from baton.api.fastpath import pop_limit
from baton.core.errors import DatabaseUnavailableError
from baton.core.queueing import PushRequest
from baton.core.settings import Settings
from baton.runtime import build_app
from baton.service.tokens import Scope
from baton.storage.engine import Store
from harness.factories import add_organisation, bearer, named_tokens, push

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


# -- push ---------------------------------------------------------------------------------------------

# The route reads `application/json; charset=utf-8` as JSON too, but the fast path leaves it alone:
# the same push through FastAPI's route.
ROUTED = {"content-type": "application/json; charset=utf-8"}
TASK = {"boefje": {"id": "dns-records"}, "input_ooi": "Hostname|internet|example.com"}
SAME_HEADERS = ("content-type", "content-length")


def push_body(priority: int = 3, task_hash: str | None = "h", data: Any = None) -> bytes:
    return orjson.dumps({"priority": priority, "hash": task_hash, "data": TASK if data is None else data})


def both(client: TestClient, path: str, fast_body: bytes, routed_body: bytes | None = None) -> tuple[Any, Any]:
    """The fast path's answer and the route's, to the same push (or to `routed_body`)."""
    fast = client.post(path, content=fast_body, headers={"content-type": "application/json"})
    routed = client.post(path, content=fast_body if routed_body is None else routed_body, headers=ROUTED)
    return fast, routed


def same_answer(fast: Any, routed: Any) -> None:
    assert fast.status_code == routed.status_code
    assert fast.content == routed.content
    assert [(name, fast.headers[name]) for name in SAME_HEADERS] == [
        (name, routed.headers[name]) for name in SAME_HEADERS
    ]
    assert fast.headers["x-request-id"] and routed.headers["x-request-id"]


@pytest.fixture
def counted_pushes(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each path ran the push: the fast path's `push_task` and the service's `push`."""
    calls = {"fast": 0, "service": 0}
    fast_push, service = fastpath.push_task, client.app.state.queues  # type: ignore[attr-defined]
    service_push = service.push

    async def counted_fast(*args: Any) -> Any:
        calls["fast"] += 1
        return await fast_push(*args)

    async def counted_service(request: PushRequest) -> Any:
        calls["service"] += 1
        return await service_push(request)

    monkeypatch.setattr(fastpath, "push_task", counted_fast)
    monkeypatch.setattr(service, "push", counted_service)
    return calls


def test_the_fast_push_is_the_routes_push(store: Store, client: TestClient, counted_pushes: dict[str, int]) -> None:
    add_organisation(store, "acme", maxsize=0)
    fast = client.post("/queues/boefje-acme/push", content=push_body(task_hash="a"))  # no Content-Type
    routed = client.post("/queues/boefje-acme/push", content=push_body(task_hash="b"), headers=ROUTED)
    assert counted_pushes == {"fast": 1, "service": 2}  # the second went through the route
    assert fast.status_code == routed.status_code == 201
    assert [(name, fast.headers[name]) for name in SAME_HEADERS] == [
        (name, routed.headers[name]) for name in SAME_HEADERS
    ]
    fast_task, routed_task = orjson.loads(fast.content), orjson.loads(routed.content)
    assert list(fast_task) == list(routed_task) and set(fast_task) == ALL_KEYS  # the same keys in the same order
    identity = ("id", "hash", "created_at", "modified_at")
    assert {key: fast_task[key] for key in fast_task if key not in identity} == {
        key: routed_task[key] for key in routed_task if key not in identity
    }
    assert fast_task["hash"] == "a" and fast_task["status"] == "queued" and fast_task["data"] == TASK
    # The same task pushed again: its priority changes, both ways alike (200 and the same document).
    again, routed_again = both(client, "/queues/boefje-acme/push", push_body(priority=1, task_hash="a"))
    assert again.status_code == routed_again.status_code == 200
    assert orjson.loads(again.content)["id"] == orjson.loads(routed_again.content)["id"] == fast_task["id"]
    assert again.content.replace(b'"modified_at"', b"") != b"" and orjson.loads(again.content)["priority"] == 1
    assert orjson.loads(again.content) | {"modified_at": None} == orjson.loads(routed_again.content) | {
        "modified_at": None
    }
    assert client.get("/queues/boefje-acme").json()["size"] == 2


def test_a_fast_push_of_an_openkat_job_stores_it_as_the_route_does(store: Store, client: TestClient) -> None:
    add_organisation(store, "acme", maxsize=0)
    job = {"boefje": {"id": "dns-records"}, "input_ooi": "Hostname|internet|example.com", "organization": "acme"}
    fast, routed = both(client, "/queues/boefje-acme/push", push_body(task_hash=None, data=job))
    assert (fast.status_code, routed.status_code) == (201, 200)  # the job's own hash: the second is the first
    fast_task, routed_task = fast.json(), routed.json()
    assert fast_task["data"]["id"] == fast_task["id"] == routed_task["id"]
    assert fast_task["hash"] == routed_task["hash"] is not None
    assert client.get("/queues/boefje-acme").json()["size"] == 1


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b'{"priority": 1}', {}),  # no data
        (b'{"priority": "1", "data": {}}', {}),  # a string for a number
        (b'{"priority": 1, "data": {}, "extra": 1}', {}),
        (b'{"priority": 1, "data": {"x": NaN}}', {}),  # not JSON
        (b'[{"priority": 1, "data": {}}]', {}),
        (b'{"priority": 1, "data": {}}', {"content-type": "text/plain"}),
    ],
)
def test_pushes_the_fast_path_refuses_get_the_routes_answer(
    store: Store, client: TestClient, counted_pushes: dict[str, int], body: bytes, headers: dict[str, str]
) -> None:
    add_organisation(store, "acme", maxsize=0)
    answer = client.post("/queues/boefje-acme/push", content=body, headers=headers)
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][0] == "body"
    assert counted_pushes == {"fast": 0, "service": 0}


def test_odd_requests_are_left_to_the_route(store: Store, client: TestClient, counted_pushes: dict[str, int]) -> None:
    add_organisation(store, "acme", maxsize=0)
    query = client.post("/queues/boefje-acme/push", params={"x": 1}, content=push_body())
    assert query.status_code == 422 and query.json()["detail"][0]["loc"] == ["query", "x"]
    assert client.post("/queues/boefje-acme/push/", content=push_body(), follow_redirects=False).status_code == 307
    assert client.put("/queues/boefje-acme/push", content=push_body()).status_code == 405
    assert client.post("/queues/boefje-acme/push").status_code == 422  # no body
    assert counted_pushes["fast"] == 0


def test_refused_pushes_are_answered_as_the_route_answers_them(
    store: Store, client: TestClient, counted_pushes: dict[str, int]
) -> None:
    add_organisation(store, "acme", maxsize=1)
    unknown, routed_unknown = both(client, "/queues/boefje-nobody/push", push_body())
    same_answer(unknown, routed_unknown)
    assert unknown.status_code == 404 and "boefje-nobody" in unknown.json()["message"]

    too_large = push_body(data={"blob": "x" * 70_000})
    large, routed_large = both(client, "/queues/boefje-acme/push", too_large)
    same_answer(large, routed_large)
    assert large.status_code == 413

    assert client.post("/queues/boefje-acme/push", content=push_body(task_hash="first")).status_code == 201
    full, routed_full = both(client, "/queues/boefje-acme/push", push_body(task_hash="second"))
    same_answer(full, routed_full)
    assert full.status_code == 429

    assert client.patch("/schedulers/boefje-acme", json={"enabled": False}).status_code == 200
    disabled, routed_disabled = both(client, "/queues/boefje-acme/push", push_body(task_hash="third"))
    same_answer(disabled, routed_disabled)
    assert disabled.status_code == 409
    # Each push ran once: a refusal by the fast path is answered there, not run again by the route.
    assert counted_pushes == {"fast": 5, "service": 9}


@pytest.mark.parametrize("failure", ["outage", "bug"])
def test_a_push_that_fails_is_answered_where_it_failed_and_not_run_again(
    store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """A push that raised may have written its task (a connection lost after the commit): the fast
    path answers as the route would (503, or 500 for a bug), and never hands it to the route."""
    add_organisation(store, "acme", maxsize=0)
    with TestClient(build_app(settings, store), raise_server_exceptions=False) as client:
        executor = client.app.state.queues.door  # type: ignore[attr-defined]
        calls = []

        async def failing(request: PushRequest, now: Any) -> Any:
            calls.append(request)
            if failure == "outage":
                raise DatabaseUnavailableError("database connection lost; retry later", "server closed the connection")
            raise RuntimeError("a bug")

        monkeypatch.setattr(executor, "push", failing)
        fast, routed = both(client, "/queues/boefje-acme/push", push_body())
    assert len(calls) == 2  # once each: the fast path did not hand its failed push to the route
    assert fast.status_code == routed.status_code == (503 if failure == "outage" else 500)
    if failure == "outage":
        same_answer(fast, routed)
    else:  # the server-error middleware's answer, naming each request's own id
        for answer in (fast, routed):
            assert answer.json()["message"].startswith("internal server error (request id ")


def test_the_fast_push_keeps_to_the_push_scope(store: Store) -> None:
    add_organisation(store, "acme", maxsize=0)
    tokens = named_tokens(store, {"feeder": [Scope.PUSH], "runner": [Scope.POP], "boss": [Scope.ADMIN]})
    settings = Settings(database_url=store.url, auth="on")
    with TestClient(build_app(settings, store)) as client:
        path = "/queues/boefje-acme/push"
        assert client.post(path, content=push_body(task_hash="1")).status_code == 401
        assert client.post(path, content=push_body(task_hash="1"), headers=bearer("baton_nope")).status_code == 401
        denied = client.post(path, content=push_body(task_hash="1"), headers=bearer(tokens["runner"]))
        assert denied.status_code == 403 and "push" in denied.json()["message"]
        for n, name in enumerate(["feeder", "feeder", "boss", "boss"]):  # first unknown to the cache, then cached
            assert (
                client.post(path, content=push_body(task_hash=f"t{n}"), headers=bearer(tokens[name])).status_code == 201
            )
        denied_again = client.post(path, content=push_body(task_hash="1"), headers=bearer(tokens["runner"]))
        assert denied_again.status_code == 403
        assert client.get("/queues/boefje-acme", headers=bearer(tokens["boss"])).json()["size"] == 4


# -- OpenKAT's push -----------------------------------------------------------------------------------


def openkat_body(host: str, **extra: Any) -> bytes:
    job = {"boefje": {"id": "dns-records"}, "input_ooi": f"Hostname|internet|{host}", "organization": "acme"}
    return orjson.dumps({"organisation": "acme", "priority": 2, "data": job, **extra})


@pytest.fixture
def counted_openkat_pushes(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The schedulers the fast path's OpenKAT push ran for."""
    calls: list[str] = []
    answer = fastpath.push_answer

    async def counted(queues: Any, scheduler: str, document: Any) -> Any:
        calls.append(scheduler)
        return await answer(queues, scheduler, document)

    monkeypatch.setattr(fastpath, "push_answer", counted)
    return calls


def test_the_fast_openkat_push_is_the_routes_push(
    store: Store, client: TestClient, counted_openkat_pushes: list[str]
) -> None:
    """OpenKAT's web UI pushes a boefje task; the fast path answers it as the route does: 201 with the
    task in OpenKAT's shape (its schedule made), OpenKAT's 409 with Retry-After for a twin, and the
    service's refusals as the route's handlers answer them."""
    add_organisation(store, "acme", maxsize=0)
    fast, routed = both(client, "/schedulers/boefje/push", openkat_body("a.example"), openkat_body("b.example"))
    assert counted_openkat_pushes == ["boefje"]  # the second went through the route
    assert fast.status_code == routed.status_code == 201
    assert [(name, fast.headers[name]) for name in ("content-type",)] == [("content-type", "application/json")]
    fast_task, routed_task = orjson.loads(fast.content), orjson.loads(routed.content)
    assert list(fast_task) == list(routed_task)  # the same keys in the same order
    different = ("id", "hash", "schedule_id", "created_at", "modified_at", "data")
    assert {key: value for key, value in fast_task.items() if key not in different} == {
        key: value for key, value in routed_task.items() if key not in different
    }
    assert fast_task["scheduler_id"] == "boefje" and fast_task["schedule_id"] is not None
    assert client.get(f"/schedules/{fast_task['schedule_id']}").status_code == 200

    twin, routed_twin = both(client, "/schedulers/boefje/push", openkat_body("a.example"))
    same_answer(twin, routed_twin)
    assert twin.status_code == 409 and twin.headers["retry-after"] == routed_twin.headers["retry-after"] == "60"

    not_a_job, routed_not_a_job = both(
        client, "/schedulers/boefje/push", orjson.dumps({"organisation": "acme", "data": {}})
    )
    same_answer(not_a_job, routed_not_a_job)
    assert not_a_job.status_code == 400
    unknown, routed_unknown = both(client, "/schedulers/nothing/push", openkat_body("c.example"))
    same_answer(unknown, routed_unknown)
    assert unknown.status_code == 404
    assert counted_openkat_pushes == ["boefje", "boefje", "boefje", "nothing"]


def test_openkat_pushes_the_fast_path_refuses_get_the_routes_answer(
    store: Store, client: TestClient, counted_openkat_pushes: list[str]
) -> None:
    add_organisation(store, "acme", maxsize=0)
    for body in (b'{"organisation": "acme"}', b'{"organisation": "acme", "data": []}', b"[1]", b"{"):
        answer = client.post("/schedulers/boefje/push", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][0] == "body"
    assert counted_openkat_pushes == []


# -- a task read back or moved along ------------------------------------------------------------------


@pytest.fixture
def counted_task_answers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statuses of the tasks the fast path answered for `GET` and `PATCH /tasks/{id}`."""
    answered: list[str] = []
    document = fastpath.openkat_task_document

    def counted(record: dict[str, Any]) -> dict[str, Any]:
        answered.append(record["status"])
        return document(record)

    monkeypatch.setattr(fastpath, "openkat_task_document", counted)
    return answered


def test_the_fast_task_read_and_patch_are_the_routes(
    store: Store, client: TestClient, counted_task_answers: list[str]
) -> None:
    add_organisation(store, "acme", maxsize=0)
    task_id = client.post("/queues/boefje-acme/push", content=push_body()).json()["id"]
    routed_path = f"/tasks/{task_id.upper()}"  # FastAPI reads any spelling; the fast path only Baton's own

    read, routed_read = client.get(f"/tasks/{task_id}"), client.get(routed_path)
    same_answer(read, routed_read)
    assert read.status_code == 200 and read.json()["status"] == "queued"
    assert counted_task_answers == ["queued"]

    assert client.post("/queues/boefje-acme/pop").json()["id"] == task_id
    running = client.patch(f"/tasks/{task_id}", json={"status": "running"})
    assert running.status_code == 200 and running.json()["status"] == "running"
    # The route, to the same status again: a PATCH to the status a task has is refused alike.
    again = client.patch(f"/tasks/{task_id}", content=b'{"status": "running"}')
    routed_again = client.patch(routed_path, content=b'{"status": "running"}', headers=ROUTED)
    same_answer(again, routed_again)
    assert again.status_code == 409
    completed = client.patch(f"/tasks/{task_id}", json={"status": "completed"})
    assert completed.json()["status"] == "completed"
    assert client.get(f"/tasks/{task_id}").content == completed.content == client.get(routed_path).content
    assert counted_task_answers == ["queued", "running", "completed", "completed"]


def test_task_requests_the_fast_path_leaves_get_the_routes_answers(
    store: Store, client: TestClient, counted_task_answers: list[str]
) -> None:
    add_organisation(store, "acme", maxsize=0)
    task_id = client.post("/queues/boefje-acme/push", content=push_body()).json()["id"]
    nobody = "00000000-0000-4000-8000-000000000000"
    unknown, routed_unknown = client.get(f"/tasks/{nobody}"), client.get(f"/tasks/{nobody.upper()}")
    assert unknown.status_code == routed_unknown.status_code == 404
    assert unknown.json()["message"] == routed_unknown.json()["message"]
    patched_unknown = client.patch(f"/tasks/{nobody}", json={"status": "running"})
    assert patched_unknown.status_code == 404
    assert client.get("/tasks/not-a-uuid").status_code == 422
    assert client.get("/tasks/stats").status_code == 200  # a route of its own, not a task id
    assert client.get(f"/tasks/{task_id}", params={"x": 1}).status_code == 422  # an unknown parameter
    bad = client.patch(f"/tasks/{task_id}", json={"status": "sleeping"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "status"]
    assert client.patch(f"/tasks/{task_id}", json={"status": "queued", "x": 1}).status_code == 422
    assert client.patch(f"/tasks/{task_id}").status_code == 422  # no body
    assert client.put(f"/tasks/{task_id}", json={"status": "running"}).status_code == 405
    assert counted_task_answers == []  # every one of them the route's


def test_the_fast_task_requests_keep_to_their_scopes(store: Store) -> None:
    add_organisation(store, "acme", maxsize=0)
    tokens = named_tokens(store, {"feeder": [Scope.PUSH], "runner": [Scope.POP], "reader": [Scope.READ]})
    settings = Settings(database_url=store.url, auth="on")
    with TestClient(build_app(settings, store)) as client:
        pushed = client.post("/queues/boefje-acme/push", content=push_body(), headers=bearer(tokens["feeder"]))
        path = f"/tasks/{pushed.json()['id']}"
        assert client.get(path).status_code == 401
        assert client.get(path, headers=bearer(tokens["feeder"])).status_code == 403
        assert client.get(path, headers=bearer(tokens["reader"])).status_code == 200
        assert client.get(path, headers=bearer(tokens["reader"])).status_code == 200  # cached now
        cancel = {"status": "cancelled"}
        assert client.patch(path, json=cancel, headers=bearer(tokens["reader"])).status_code == 403
        assert client.patch(path, json=cancel, headers=bearer(tokens["runner"])).status_code == 200
        assert client.patch(path, json=cancel, headers=bearer(tokens["runner"])).status_code == 409
