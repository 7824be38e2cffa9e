"""The stand-ins answer as the real services do: the same calls to both, compared by status code and the
structure of every answer. Runs only against real services run from OpenKAT's source:
BATON_TEST_KATALOGUS_URL (KATalogus, with BOEFJES_DEDUPLICATE=true), BATON_TEST_BYTES_URL with
BATON_TEST_BYTES_USERNAME and BATON_TEST_BYTES_PASSWORD (Bytes). Octopoes needs XTDB: not compared here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from baton.openkat import BytesClient
from harness.standins import BytesStandin, StandinServer
from tests.integration.test_openkat_clients import http, katalogus_standin_server, real_katalogus_url

Call = Callable[..., Any]


def shape(value: Any) -> Any:
    """A JSON answer's structure: the keys of an object, the shape of a list's first item."""
    if isinstance(value, dict):
        return sorted(value)
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None if value is None else type(value).__name__


@contextmanager
def conversation(url: str) -> Iterator[tuple[Call, list[tuple[str, int, Any]]]]:
    """`call(label, method, path, ...)` records (label, status, shape) and returns the answer's body."""
    answers: list[tuple[str, int, Any]] = []
    # A connection per call: KATalogus closes one after an unhandled error (a 500 below).
    with httpx.Client(base_url=url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as api:

        def call(label: str, method: str, path: str, **options: Any) -> Any:
            response = api.request(method, path, **options)
            is_json = response.content and "json" in response.headers.get("content-type", "")
            body = response.json() if is_json else response.text
            answers.append((label, response.status_code, shape(body)))
            return body

        yield call, answers


def katalogus_conversation(url: str, suffix: str) -> list[tuple[str, int, Any]]:
    """Every call Baton's client and the tests make to KATalogus."""
    organisation = f"baton-wire-{suffix}"
    with conversation(url) as (call, answers):
        call("health", "GET", "/health")
        call("create without the slash", "POST", "/v1/organisations", json={"id": organisation, "name": "W"})
        call("create", "POST", "/v1/organisations/", json={"id": organisation, "name": "Wire"})
        call("create again", "POST", "/v1/organisations/", json={"id": organisation, "name": "Wire"})
        call("create without a name", "POST", "/v1/organisations/", json={"id": f"{organisation}-x"})
        listing = call("organisations", "GET", "/v1/organisations")
        answers[-1] = ("organisations", answers[-1][1], type(listing).__name__)  # other runs' too, on a real one
        answers.append(("an organisation in the listing", 200, shape(listing[organisation])))
        call("organisation", "GET", f"/v1/organisations/{organisation}")
        call("unknown organisation", "GET", f"/v1/organisations/{organisation}-unknown")
        call("boefje", "GET", f"/v1/organisations/{organisation}/plugins/dns-records")
        call("unknown plugin", "GET", f"/v1/organisations/{organisation}/plugins/no-such-plugin")
        call("normalizers", "GET", f"/v1/organisations/{organisation}/plugins", params={"plugin_type": "normalizer"})
        call("type is not a filter", "GET", f"/v1/organisations/{organisation}/plugins", params={"type": "x"})
        enable = {"json": {"enabled": True}}
        call("enable", "PATCH", f"/v1/organisations/{organisation}/plugins/dns-records", **enable)
        unknown_organisation = f"/v1/organisations/{organisation}-x/plugins/dns-records"
        call("enable, unknown organisation", "PATCH", unknown_organisation, **enable)
        call("enable, unknown plugin", "PATCH", f"/v1/organisations/{organisation}/plugins/no-such-plugin", **enable)
        params = {"organisation_id": organisation, "boefje_id": "dns-records", "enabled": True, "with_duplicates": True}
        call("configs", "GET", "/v1/configs", params=params)
        settings = f"/v1/organisations/{organisation}/dns-records/settings"
        call("settings", "GET", settings)
        call("put settings", "PUT", settings, json={"TIMEOUT": "5"})
        call("settings put", "GET", settings)
        call(
            "put settings, unknown organisation",
            "PUT",
            f"/v1/organisations/{organisation}-x/dns-records/settings",
            json={},
        )
        call(
            "put settings, a normalizer",
            "PUT",
            f"/v1/organisations/{organisation}/kat_adr_finding_types_normalize/settings",
            json={},
        )
        call("put settings, not an object", "PUT", settings, json=[1])
        call("delete settings", "DELETE", settings)
        call("delete settings again", "DELETE", settings)
        call("delete", "DELETE", f"/v1/organisations/{organisation}")
        call("delete again", "DELETE", f"/v1/organisations/{organisation}")
    return answers


def test_the_katalogus_standin_answers_as_the_real_katalogus() -> None:
    real_url = real_katalogus_url()
    suffix = uuid.uuid4().hex[:8]
    real = katalogus_conversation(real_url, suffix)
    with katalogus_standin_server() as standin_url:
        standin = katalogus_conversation(standin_url, suffix)
    assert standin == real


def real_bytes() -> tuple[str, str, str]:
    url = os.environ.get("BATON_TEST_BYTES_URL")
    if not url:
        pytest.skip("BATON_TEST_BYTES_URL is not set (Bytes run from OpenKAT's bytes/, and its user's credentials)")
    return url.rstrip("/"), os.environ["BATON_TEST_BYTES_USERNAME"], os.environ["BATON_TEST_BYTES_PASSWORD"]


def bytes_conversation(url: str, username: str, password: str, organisation: str) -> list[tuple[str, int, Any]]:
    """Every call Baton's client makes to Bytes, and the one that adds runs."""
    start = datetime(2025, 11, 1, tzinfo=UTC)
    with conversation(url) as (call, answers):
        call("health", "GET", "/health")
        call("login, wrong password", "POST", "/token", data={"username": username, "password": "wrong"})
        call("login, no password", "POST", "/token", data={"username": username})
        token = call("login", "POST", "/token", data={"username": username, "password": password})["access_token"]
        bearer = {"Authorization": f"bearer {token}"}
        listing = "/bytes/boefje_meta"
        call("runs without a token", "GET", listing, params={"organization": organisation})
        call("runs, a bad token", "GET", listing, params={"organization": organisation}, headers={"Authorization": "x"})
        for day, input_ooi in enumerate(["Hostname|internet|a.example", None, "Hostname|internet|b.example"]):
            run = {
                "id": str(uuid.uuid4()),
                "started_at": (start + timedelta(days=day)).isoformat(),
                "ended_at": (start + timedelta(days=day, seconds=5)).isoformat(),
                "boefje": {"id": "dns-records", "version": None},
                "input_ooi": input_ooi,
                "arguments": {},
                "organization": organisation,
            }
            call("add a run", "POST", listing, json=run, headers=bearer)
        call("add it again", "POST", listing, json=run, headers=bearer)
        params = {"organization": organisation, "boefje_id": "dns-records", "limit": 10, "descending": "true"}
        runs = call("runs, no input_ooi", "GET", listing, params=params, headers=bearer)
        answers.append(("objects of runs, no input_ooi", 200, [run["input_ooi"] for run in runs]))
        runs = call("runs, every object", "GET", listing, params={**params, "input_ooi": "*"}, headers=bearer)
        answers.append(("objects of runs, every object", 200, [run["input_ooi"] for run in runs]))
        answers.append(("times", 200, [run["started_at"] for run in runs]))
        page = {**params, "input_ooi": "*", "limit": 1, "offset": 1}
        runs = call("second page", "GET", listing, params=page, headers=bearer)
        answers.append(("objects of the second page", 200, [run["input_ooi"] for run in runs]))
        one = {**params, "input_ooi": "Hostname|internet|a.example", "limit": 1}
        call("one object's last run", "GET", listing, params=one, headers=bearer)
        call("no organization", "GET", listing, params={"boefje_id": "dns-records"}, headers=bearer)
    return answers


def test_the_bytes_standin_answers_as_the_real_bytes() -> None:
    url, username, password = real_bytes()
    organisation = f"baton-wire-{uuid.uuid4().hex[:8]}"
    real = bytes_conversation(url, username, password, organisation)
    standin = BytesStandin(username, password)
    with StandinServer(standin.app) as server:
        assert bytes_conversation(server.url, username, password, organisation) == real


def test_the_bytes_client_reads_a_real_bytes() -> None:
    url, username, password = real_bytes()
    organisation = f"baton-client-{uuid.uuid4().hex[:8]}"
    client = BytesClient(http("bytes", url, timeout=30.0), username, password)  # its login hashes with bcrypt: seconds
    client.login()
    start = datetime(2025, 11, 1, tzinfo=UTC)
    with httpx.Client(base_url=url, headers={"Authorization": client.http.headers["Authorization"]}) as api:
        for day in range(5):
            run = {
                "id": str(uuid.uuid4()),
                "started_at": (start + timedelta(days=day)).isoformat(),
                "ended_at": (start + timedelta(days=day, seconds=5)).isoformat(),
                "boefje": {"id": "dns-records", "version": "1"},
                "input_ooi": f"Hostname|internet|host-{day}.example",
                "arguments": {},
                "organization": organisation,
            }
            assert api.post("/bytes/boefje_meta", json=run).status_code == 201
    every = list(client.boefje_runs(organisation, "dns-records", page_size=2))
    assert [run.input_ooi for run in every] == [f"Hostname|internet|host-{day}.example" for day in range(4, -1, -1)]
    since = start + timedelta(days=3)
    assert [run.started_at for run in client.boefje_runs(organisation, "dns-records", since=since, page_size=2)] == [
        start + timedelta(days=4),
        since,
    ]
    last = client.last_run(organisation, "dns-records", "Hostname|internet|host-2.example")
    assert last is not None and last.ended_at == start + timedelta(days=2, seconds=5)
