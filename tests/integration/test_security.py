"""Authentication, scopes, limits and request ids."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from baton.api.security import AuthenticatedRoute, required_scope
from baton.core.settings import Settings
from baton.runtime import build_app
from baton.service.tokens import Scope
from baton.storage.engine import Store
from harness.factories import bearer, named_tokens


@pytest.fixture
def secured(store: Store) -> Iterator[tuple[TestClient, dict[str, str]]]:
    tokens = named_tokens(
        store,
        {"reader": [Scope.READ], "runner": [Scope.READ, Scope.POP], "feeder": [Scope.PUSH], "boss": [Scope.ADMIN]},
    )
    settings = Settings(database_url=store.url, auth="on", max_body_bytes=4096)
    with TestClient(build_app(settings, store)) as client:
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


def every_route(app: FastAPI) -> list[tuple[str, set[str], APIRoute]]:
    """(path, methods, route) of every API route the app serves, the included routers' too. FastAPI from
    0.165 keeps an included router as one entry of `app.routes` (`iter_route_contexts` opens it);
    before, `app.routes` listed the routes themselves."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        return [(route.path, route.methods, route) for route in app.routes if isinstance(route, APIRoute)]
    return [
        (context.path, context.methods or set(), context.original_route)
        for context in iter_route_contexts(app.routes)
        if isinstance(context.original_route, APIRoute)
    ]


def test_every_route_declares_the_scope_it_needs(settings: Settings, store: Store) -> None:
    """Scopes are declared per route (api/security.py), never guessed from a path; and every route
    checks the token before anything else (AuthenticatedRoute)."""
    routes = every_route(build_app(settings, store))
    assert len(routes) > 40, "every route of every router, not only the app's own"
    for path, methods, route in routes:
        assert isinstance(route, AuthenticatedRoute), f"{sorted(methods)} {path}"
        if path in PUBLIC_ROUTES:
            continue
        scopes = [
            dependency.call.required_scope
            for dependency in route.dependant.dependencies
            if hasattr(dependency.call, "required_scope")
        ]
        assert len(scopes) == 1, f"{sorted(methods)} {path} declares {scopes}"


# A token that lacks each scope (admin grants them all).
LACKING = {Scope.READ: "feeder", Scope.POP: "reader", Scope.PUSH: "reader", Scope.ADMIN: "runner"}


def test_authentication_answers_before_anything_else_is_checked(secured: tuple[TestClient, dict[str, str]]) -> None:
    """Every route that needs a scope answers 401 without a token and 403 with one lacking the scope,
    however wrong the rest of the request: an unknown query parameter, text no database can store, a
    path parameter of the wrong kind, a body that is not JSON. (Issue #44: `POST /queues/{id}/pop?foo=1`
    answered 422 without a token.) Only an oversized body is refused first (413), as it streams in."""
    client, tokens = secured
    checked = 0
    for path, methods, route in every_route(client.app):
        needed = required_scope(route.dependencies)
        if needed is None:
            continue
        url = re.sub(r"\{[^}]+\}", "not-a-uuid", path) + "?foo=1&text=a%00b"
        for method in sorted(methods):
            body = {"content": b"{not json", "headers": {"content-type": "application/json"}}
            sent = body if method in ("POST", "PUT", "PATCH") else {}
            anonymous = client.request(method, url, **sent)
            assert anonymous.status_code == 401, (method, url, anonymous.text)
            assert anonymous.headers["www-authenticate"] == "Bearer"
            assert anonymous.json()["message"] == "authorization: a bearer token is required"
            lacking = {**sent, "headers": {**sent.get("headers", {}), **bearer(tokens[LACKING[needed]])}}
            refused = client.request(method, url, **lacking)
            assert refused.status_code == 403, (method, url, refused.text)
            checked += 1
    assert checked > 40
    pop = client.post("/queues/boefje-acme/pop?foo=1")  # the issue's own request
    assert pop.status_code == 401 and pop.headers["www-authenticate"] == "Bearer"
    allowed = client.post("/queues/boefje-acme/pop?foo=1", headers=bearer(tokens["runner"]))
    assert allowed.status_code == 422 and allowed.json()["message"].startswith("foo: unknown query parameter")
    nul = client.get("/tasks?organisation=a%00b", headers=bearer(tokens["reader"]))
    assert nul.status_code == 422 and "cannot be stored" in nul.json()["message"]
    too_large = client.post("/queues/boefje-acme/push", content=b"x" * 5000)
    assert too_large.status_code == 413


def test_a_pop_with_an_idempotency_key_is_refused_without_a_valid_token(
    secured: tuple[TestClient, dict[str, str]],
) -> None:
    """Issue #44: schemathesis reported this pop, sent with an Idempotency-Key, as answered 200 with an
    invalid token; it had carried a valid one (the harness' configured header). Without a token, with
    an unknown one, or with one lacking `pop`, it is refused, replays of an answered key included."""
    client, tokens = secured
    url = "/schedulers/normalizer/pop?limit=256&wait=0.005"
    sent = {"content": b"null", "headers": {"content-type": "application/json", "idempotency-key": "fuzz-44"}}

    def pop(**headers: str) -> Any:
        return client.post(url, content=sent["content"], headers={**sent["headers"], **headers})

    answered = pop(**bearer(tokens["runner"]))
    assert answered.status_code == 200 and answered.json() == {"results": []}
    assert pop(**bearer(tokens["runner"])).json() == {"results": []}  # the replay
    assert pop().status_code == 401
    assert pop(**bearer("baton_not-a-real-token")).status_code == 401
    assert pop(Authorization="Basic cnVubmVyOng=").status_code == 401
    assert pop(**bearer(tokens["reader"])).status_code == 403
