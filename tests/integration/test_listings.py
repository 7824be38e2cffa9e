"""Paged listings on both backends: `GET /organisations`, `/schedulers`, `/queues` by keyset, with the
next page in a `Link` header (RFC 8288), searches by organisation, and refusals naming the field."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.dialects import postgresql

from baton.core.listing import PageRequest
from baton.storage.engine import Store
from baton.storage.queues.listings import organisations_statement, schedulers_statement
from harness.factories import add_organisations

LINK = re.compile(r'^<(?P<url>[^>]+)>; rel="next"$')
ORGS = ["acme", "acme-eu", "acmecorp", "beta", "Zeta", "gamma.1", "gamma_2"]


def create(client: TestClient, *orgs: str) -> None:
    for org in orgs:
        assert client.post("/organisations", json={"id": org, "name": org}).status_code == 201


def walk(client: TestClient, path: str, **params: Any) -> tuple[list[str], int]:
    """Follow the `Link` headers from the first page to the last: every id, and the number of pages."""
    ids: list[str] = []
    response = client.get(path, params=params)
    pages = 1
    while True:
        assert response.status_code == 200, response.text
        ids += [row["id"] for row in response.json()]
        link = response.headers.get("link")
        if link is None:
            return ids, pages
        match = LINK.match(link)
        assert match, link
        response = client.get(match["url"])
        pages += 1


def test_pages_walk_every_organisation_once_in_byte_order(client: TestClient) -> None:
    create(client, *ORGS)
    ids, pages = walk(client, "/organisations", limit=2)
    assert ids == sorted(ORGS)  # byte order: 'Zeta' before 'acme'
    assert pages == 4
    assert [row["id"] for row in client.get("/organisations").json()] == sorted(ORGS)  # default: 100 a page
    assert "link" not in client.get("/organisations").headers


def test_schedulers_and_queues_page_by_organisation_then_id(client: TestClient) -> None:
    create(client, *ORGS)
    expected = [f"{kind}-{org}" for org in sorted(ORGS) for kind in ("boefje", "normalizer", "report")]
    for path in ("/schedulers", "/queues"):
        ids, pages = walk(client, path, limit=4)
        assert ids == expected, path
        assert pages == 6  # 21 rows, 4 a page
    queue = client.get("/queues", params={"limit": 1}).json()
    assert queue == [
        {
            "id": "boefje-Zeta",
            "organisation": "Zeta",
            "type": "boefje",
            "size": 0,
            "in_flight": 0,
            "maxsize": 50,
            "enabled": True,
        }
    ]


def test_a_cursor_stays_valid_while_rows_come_and_go(client: TestClient) -> None:
    create(client, "a1", "a2", "a3", "a4", "a5")
    first = client.get("/organisations", params={"limit": 2})
    assert [row["id"] for row in first.json()] == ["a1", "a2"]
    next_url = LINK.match(first.headers["link"])["url"]  # type: ignore[index]
    create(client, "a0", "a25")  # one before the cursor, one after it
    assert client.delete("/organisations/a3").status_code == 204
    assert client.delete("/organisations/a2").status_code == 204  # the row the cursor names
    second = client.get(next_url)
    assert [row["id"] for row in second.json()] == ["a25", "a4"]  # no row repeated, none skipped
    third = client.get(LINK.match(second.headers["link"])["url"])  # type: ignore[index]
    assert [row["id"] for row in third.json()] == ["a5"] and "link" not in third.headers


def test_search_by_organisation_exact_and_by_prefix(client: TestClient) -> None:
    create(client, *ORGS)
    exact = client.get("/schedulers", params={"organisation": "acme"}).json()
    assert [row["id"] for row in exact] == ["boefje-acme", "normalizer-acme", "report-acme"]
    ids, _ = walk(client, "/queues", q="acme", limit=2)
    assert ids == [
        f"{kind}-{org}" for org in ("acme", "acme-eu", "acmecorp") for kind in ("boefje", "normalizer", "report")
    ]
    assert [row["id"] for row in client.get("/organisations", params={"q": "gamma"}).json()] == ["gamma.1", "gamma_2"]
    assert client.get("/organisations", params={"q": "zeta"}).json() == []  # case matters, as in ids
    assert client.get("/queues", params={"organisation": "nobody"}).json() == []
    both = client.get("/schedulers", params={"organisation": "acme-eu", "q": "acme"}).json()
    assert {row["organisation"] for row in both} == {"acme-eu"}


def test_the_next_link_keeps_the_search(client: TestClient) -> None:
    create(client, *ORGS)
    response = client.get("/queues", params={"q": "acme", "limit": 4})
    url = LINK.match(response.headers["link"])["url"]  # type: ignore[index]
    assert "q=acme" in url and "limit=4" in url and url.startswith("http")


@pytest.mark.parametrize("path", ["/organisations", "/schedulers", "/queues"])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"cursor": "garbage!"}, "cursor"),
        ({"q": "a b"}, "q"),
    ],
)
def test_refusals_are_json_and_name_the_field(
    client: TestClient, path: str, params: dict[str, Any], field: str
) -> None:
    response = client.get(path, params=params)
    assert response.status_code == 422
    body = response.json()
    assert body["message"].startswith(f"{field}: "), body
    assert body["detail"][0]["loc"] == ["query", field]


def test_a_cursor_of_one_listing_is_refused_by_another(client: TestClient) -> None:
    create(client, "a1", "a2")
    link = client.get("/queues", params={"limit": 1}).headers["link"]
    cursor = re.search(r"cursor=([^&>]+)", link)[1]  # type: ignore[index]
    refused = client.get("/organisations", params={"cursor": cursor})
    assert refused.status_code == 422 and "another listing" in refused.json()["message"]
    assert client.get("/schedulers", params={"cursor": cursor}).status_code == 422
    assert client.get("/queues", params={"cursor": cursor}).status_code == 200


def test_the_maximum_page_holds_a_thousand(client: TestClient) -> None:
    create(client, "only")
    response = client.get("/queues", params={"limit": 1000})
    assert response.status_code == 200 and len(response.json()) == 3 and "link" not in response.headers


def rows_read(plan: dict[str, Any]) -> int:
    """Rows a plan's nodes returned or threw away by a filter, all nodes summed."""
    own = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
    return own + sum(rows_read(child) for child in plan.get("Plans", []))


def test_a_deep_page_and_a_search_read_about_as_many_rows_as_they_show(pg_store: Store) -> None:
    """At 3,000 schedulers, each page is one index range (migration 0013), not a walk from the start."""
    add_organisations(pg_store, [f"org-{n:04d}" for n in range(1_000)])
    with pg_store.engine.begin() as conn:
        conn.execute(text("ANALYZE organisations"))
        conn.execute(text("ANALYZE schedulers"))
    requests = [
        PageRequest("schedulers", limit=10, after=("org-0990", "boefje-org-0990")),
        PageRequest("schedulers", limit=10, before=("org-0500", "normalizer-org-0500")),
        PageRequest("schedulers", limit=10, prefix="org-077"),
        PageRequest("organisations", limit=10, after=("org-0900",)),
        PageRequest("organisations", limit=10, prefix="org-09"),
    ]
    for request in requests:
        statement = organisations_statement if request.listing == "organisations" else schedulers_statement
        with pg_store.session() as session:
            query = statement(session, request)
            shown = len(session.scalars(query).all())
            sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
            [plan] = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()
        assert shown == 11, request  # a full page and the one that says there is more
        assert rows_read(plan["Plan"]) <= 3 * (shown + 3), (request, plan)
