"""Authentication, scopes, limits and request ids."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from baton.api import create_app
from baton.core.settings import Settings
from baton.service.tokens import Scope, create_token
from baton.storage.engine import Store
from harness.factories import bearer


@pytest.fixture
def secured(store: Store) -> Iterator[tuple[TestClient, dict[str, str]]]:
    tokens = {}
    with store.session() as session:
        for name, scopes in {
            "reader": [Scope.READ],
            "runner": [Scope.READ, Scope.POP],
            "feeder": [Scope.PUSH],
            "boss": [Scope.ADMIN],
        }.items():
            tokens[name] = create_token(session, name, scopes)
    settings = Settings(database_url=store.url, auth="on", max_body_bytes=4096)
    with TestClient(create_app(settings, store)) as client:
        yield client, tokens


def test_probes_are_open_and_everything_else_needs_a_token(secured: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = secured
    assert client.get("/health").status_code == 200
    assert client.get("/ready").status_code == 200  # a readiness probe carries no token
    for method, path in [
        ("GET", "/queues"),
        ("POST", "/queues/boefje-x/pop"),
        ("GET", "/metrics"),
        ("POST", "/organisations"),
        ("GET", "/tasks"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == "Bearer"
        assert "token" in response.json()["message"]
    wrong = client.get("/queues", headers=bearer("baton_not-a-real-token"))
    assert wrong.status_code == 401 and "unknown token" in wrong.json()["message"]


def test_scopes(secured: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = secured
    org = {"id": "acme", "name": "Acme"}
    denied = client.post("/organisations", json=org, headers=bearer(tokens["runner"]))
    assert denied.status_code == 403 and "admin" in denied.json()["message"]
    assert client.post("/organisations", json=org, headers=bearer(tokens["boss"])).status_code == 201
    push = {"priority": 1, "data": {}}
    assert client.post("/queues/boefje-acme/push", json=push, headers=bearer(tokens["runner"])).status_code == 403
    pushed = client.post("/queues/boefje-acme/push", json=push, headers=bearer(tokens["feeder"]))
    assert pushed.status_code == 201
    assert client.get("/queues", headers=bearer(tokens["feeder"])).status_code == 403
    assert client.get("/queues", headers=bearer(tokens["reader"])).status_code == 200
    no_pop = client.post("/queues/boefje-acme/pop", headers=bearer(tokens["reader"]))
    assert no_pop.status_code == 403 and "'pop'" in no_pop.json()["message"]
    task = client.post("/queues/boefje-acme/pop", headers=bearer(tokens["runner"])).json()
    assert task["id"] == pushed.json()["id"]
    assert (
        client.patch(f"/tasks/{task['id']}", json={"status": "running"}, headers=bearer(tokens["runner"])).status_code
        == 200
    )
    assert client.post("/schedulers/boefje/pop", headers=bearer(tokens["runner"])).status_code == 200
    events = client.post(
        "/organisations/acme/events",
        json={"type": "raw_file_received", "raw_file": {"id": "r", "mime_types": ["x"]}},
        headers=bearer(tokens["feeder"]),
    )
    assert events.status_code == 202
    assert client.get("/metrics", headers=bearer(tokens["boss"])).status_code == 200


def test_auth_defaults_off_only_on_loopback() -> None:
    assert not Settings(host="127.0.0.1").auth_required
    assert not Settings(host="localhost").auth_required
    assert Settings(host="0.0.0.0").auth_required
    assert Settings(host="127.0.0.1", auth="on").auth_required
    assert not Settings(host="0.0.0.0", auth="off").auth_required


def test_oversized_bodies_are_refused(secured: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = secured
    big = b'{"priority": 1, "data": {"x": "' + b"y" * 5000 + b'"}}'
    response = client.post(
        "/queues/boefje-acme/push",
        content=big,
        headers={**bearer(tokens["feeder"]), "content-type": "application/json"},
    )
    assert response.status_code == 413 and "body" in response.json()["message"]

    def chunks() -> Iterator[bytes]:
        yield big[:3000]
        yield big[3000:]

    streamed = client.post(
        "/queues/boefje-acme/push",
        content=chunks(),
        headers={**bearer(tokens["feeder"]), "content-type": "application/json"},
    )
    assert streamed.status_code == 413


def test_request_ids(client: TestClient) -> None:
    generated = client.get("/health").headers["x-request-id"]
    assert len(generated) == 32
    assert client.get("/queues", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == "abc-123"


# The status page's shell and its script and style sheet hold no data; its data routes need `read`.
PUBLIC_ROUTES = {
    "/health",
    "/ready",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/ui",
    "/ui/static/{name}",
}


def test_every_route_declares_the_scope_it_needs(settings: Settings, store: Store) -> None:
    """Scopes are declared per route (api/security.py), never guessed from a path."""
    from fastapi.routing import APIRoute

    from baton.api import create_app

    app = create_app(settings, store)
    for route in app.routes:
        if not isinstance(route, APIRoute) or route.path in PUBLIC_ROUTES:
            continue
        scopes = [
            dependency.call.required_scope
            for dependency in route.dependant.dependencies
            if hasattr(dependency.call, "required_scope")
        ]
        assert len(scopes) == 1, f"{sorted(route.methods)} {route.path} declares {scopes}"
