"""Bad input of any shape is a 4xx JSON answer naming the field, never a 500, on both backends."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import EXAMPLES, record, write_report
from tests.unit.test_filter_language import MALFORMED_FILTERS

POP_PATHS = ["/schedulers/boefje/pop", "/queues/boefje-acme/pop", "/schedulers/boefje-acme/pop"]


@pytest.fixture
def acme(client: TestClient) -> TestClient:
    assert client.post("/organisations", json={"id": "acme", "name": "Acme"}).status_code == 201
    return client


@pytest.mark.parametrize("path", POP_PATHS)
@pytest.mark.parametrize(("spec", "named"), MALFORMED_FILTERS)
def test_malformed_filters_answer_a_short_422_on_every_pop(acme: TestClient, path: str, spec: Any, named: str) -> None:
    response = acme.post(path, json={"filters": spec})
    assert response.status_code == 422, response.text
    body = response.json()
    assert named in body["message"] and body["message"].startswith("filters")
    assert len(response.content) < 1000, "one short message, not every alternative of the union"


def test_a_wrong_operator_is_named_in_one_line(acme: TestClient) -> None:
    response = acme.post(
        "/schedulers/boefje/pop", json={"filters": [{"column": "status", "operator": "~", "value": 1}]}
    )
    message = response.json()["message"]
    assert response.status_code == 422 and "\n" not in message
    assert message.startswith("filters[0].operator: unknown operator '~'; one of eq, ne")


def test_valid_filters_of_every_operator_pass_on_both_backends(acme: TestClient) -> None:
    acme.post("/queues/boefje-acme/push", json={"priority": 1, "data": {"a": {"b": [1, 2]}, "n": 3, "s": "x"}})
    specs = [
        [{"column": "status", "operator": "!=", "value": "queued"}],
        [{"column": "priority", "operator": "<", "value": 1}],
        [{"column": "created_at", "operator": ">", "value": "2999-01-01T00:00:00"}],
        [{"column": "hash", "operator": "ne", "value": None}],
        [{"column": "organisation", "operator": "in", "value": []}],
        {"not": [{"column": "data", "field": "n", "operator": "ge", "value": 1}]},
        [{"column": "data", "field": "a", "operator": "contains", "value": {"b": [5]}}],
        [{"column": "data", "field": "a", "operator": "contains", "value": {"b": [2]}}],
    ]
    for spec in specs[:-1]:
        response = acme.post("/schedulers/boefje/pop", json={"filters": spec})
        assert response.status_code == 200, (spec, response.text)
        assert response.json()["results"] == [], spec  # each spec but the last misses the one task
    popped = acme.post("/queues/boefje-acme/pop", json={"filters": specs[-1]})
    assert popped.status_code == 200 and popped.json()["data"]["s"] == "x"


@pytest.mark.parametrize(
    ("request_args", "field"),
    [
        ({"method": "POST", "url": "/organisations", "json": {"id": "x", "name": "a\x00b"}}, "name"),
        (
            {
                "method": "POST",
                "url": "/organisations",
                "content": json.dumps({"id": "x", "name": "a\ud800b"}),  # escaped: httpx cannot encode it
                "headers": {"content-type": "application/json"},
            },
            "name",
        ),
        (
            {"method": "POST", "url": "/queues/boefje-acme/push", "json": {"priority": 1, "data": {"k": "\x00"}}},
            "data.k",
        ),
        ({"method": "POST", "url": "/queues/boefje-acme/push", "json": {"priority": 1, "data": {"\x00": 1}}}, "key"),
        ({"method": "DELETE", "url": "/organisations/a%00b"}, "path"),
        ({"method": "GET", "url": "/tasks?organisation=a%00b"}, "query"),
    ],
)
def test_text_no_database_can_store_is_refused_by_name(
    acme: TestClient, request_args: dict[str, Any], field: str
) -> None:
    response = acme.request(**request_args)
    assert response.status_code == 422, response.text
    assert field in response.json()["message"]


# Year 0 and year 10000 in UTC: binding either overflowed Python's datetime (a 500 on PostgreSQL, issue #44).
BEFORE_YEAR_1 = "0001-01-01T00:00:00+00:01"
AFTER_YEAR_9999 = "9999-12-31T23:59:59-00:01"


def report_schedule(recipe: str = "weekly", **when: str) -> dict[str, Any]:
    data = {"type": "report", "organisation_id": "acme", "report_recipe_id": recipe}
    return {"scheduler_id": "report", "organisation": "acme", "data": data, **when}


@pytest.mark.parametrize(
    ("request_args", "field"),
    [
        # The request of issue #44, as the deep fuzz sent it.
        (
            {
                "method": "GET",
                "url": "/schedules?limit=413&max_created_at=2000-01-01&max_deadline_at=2000-01-01"
                "&min_created_at=2000-01-01&min_deadline_at=0001-01-01T00%3A00%3A00%2B00%3A01",
            },
            "min_deadline_at",
        ),
        ({"method": "GET", "url": "/schedules", "params": {"max_created_at": AFTER_YEAR_9999}}, "max_created_at"),
        ({"method": "GET", "url": "/schedules", "params": {"min_deadline_at": "0001-01-01"}}, "min_deadline_at"),
        ({"method": "GET", "url": "/tasks", "params": {"min_created_at": BEFORE_YEAR_1}}, "min_created_at"),
        ({"method": "POST", "url": "/tasks", "params": {"max_created_at": AFTER_YEAR_9999}}, "max_created_at"),
        (
            {
                "method": "POST",
                "url": "/tasks",
                "json": {"filters": [{"column": "created_at", "value": BEFORE_YEAR_1}]},
            },
            "filters[0].value",
        ),
        (
            {
                "method": "POST",
                "url": "/schedules/search",
                "json": {"filters": {"or": [{"column": "modified_at", "operator": "<", "value": AFTER_YEAR_9999}]}},
            },
            "filters.or[0].value",
        ),
        ({"method": "POST", "url": "/schedules", "json": report_schedule(deadline_at=BEFORE_YEAR_1)}, "deadline_at"),
        (
            {"method": "PATCH", "url": f"/schedules/{uuid.uuid4()}", "json": {"deadline_at": AFTER_YEAR_9999}},
            "deadline_at",
        ),
    ],
)
def test_moments_out_of_range_are_refused_by_name(acme: TestClient, request_args: dict[str, Any], field: str) -> None:
    response = acme.request(**request_args)
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert message.startswith(field) and "out of range: a moment between 0001-01-02 and 9999-12-30 (UTC)" in message


def test_the_first_and_last_moments_in_range_are_stored_and_read_back(acme: TestClient) -> None:
    earliest, latest = "0001-01-02T00:00:00+00:00", "9999-12-30T23:59:59.999999+00:00"
    created = [
        acme.post("/schedules", json=report_schedule(moment, deadline_at=moment)) for moment in (earliest, latest)
    ]
    assert [response.status_code for response in created] == [201, 201], [response.text for response in created]
    for response, moment in zip(created, (earliest, latest), strict=True):
        read = acme.get(f"/schedules/{response.json()['id']}").json()
        assert datetime.fromisoformat(read["deadline_at"]) == datetime.fromisoformat(moment)
    listed = acme.get("/schedules", params={"min_deadline_at": earliest, "max_deadline_at": latest})
    assert listed.status_code == 200 and listed.json()["count"] == 2
    tasks = acme.get("/tasks", params={"min_created_at": "0001-01-02", "max_created_at": "9999-12-30"})
    assert tasks.status_code == 200


def test_oversized_numbers_are_refused_not_overflowed(acme: TestClient) -> None:
    assert acme.get("/tasks", params={"offset": 2**63}).status_code == 422
    assert acme.post("/queues/boefje-acme/push", json={"priority": 2**40, "data": {}}).status_code == 422


def test_a_server_fault_is_a_json_500_with_the_request_id(acme: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from baton.storage.queues import task_pages

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a genuine bug")

    monkeypatch.setattr(task_pages, "list_tasks", broken)
    with TestClient(acme.app, raise_server_exceptions=False) as plain:
        response = plain.get("/tasks", headers={"X-Request-ID": "req-123"})
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/json")
    assert "req-123" in response.json()["message"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
filter_like = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "column": st.sampled_from(["data", "status", "priority", "id", "created_at", "hash", "nope"]) | json_values,
            "field": st.sampled_from(["a", "a__b", "", "a b"]) | json_values,
            "operator": st.sampled_from(["eq", "!=", "<", "in", "not_in", "like", "contains", "ge", "~"]) | json_values,
            "value": json_values,
        },
    ),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["and", "or", "not", "x"]), st.lists(children, max_size=3) | children, max_size=2
        )
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    write_report()


@settings(max_examples=max(150, EXAMPLES), deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=filter_like, path=st.sampled_from(POP_PATHS))
def test_any_filter_shape_answers_200_or_422_json(acme: TestClient, database_url: str, spec: Any, path: str) -> None:
    # json.dumps writes NaN and Infinity, which Python's JSON reader (and so FastAPI) accepts.
    body = json.dumps({"filters": spec})
    response = acme.post(path, content=body, headers={"content-type": "application/json"})
    record(database_url.partition(":")[0].partition("+")[0], f"POST {path} (filter shapes)", response.status_code)
    assert response.status_code in (200, 422), response.text
    assert response.headers["content-type"].startswith("application/json")
