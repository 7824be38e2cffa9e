"""KATalogus, Octopoes or Bytes failing (connections refused, or answering 500), over real HTTP against the
stand-ins, on both backends: `/ready` stays 200 but says "degraded", with the service and since when;
`/metrics` reports it down (`baton_outside_service_up` 0, `baton_outside_service_down_seconds`); the status
page shows a row per service with the reason; and all of it returns to "up" when the service answers
again. The API replica reads what the schedulers' callers recorded in the database (another process, in
a deployment), never the callers' own clients."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from baton.core.errors import OutsideServiceError
from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.openkat import BytesClient
from baton.runtime import build_app
from baton.storage.engine import Store
from baton.storage.scheduling.service_states import record_outside_service
from harness.standins import BytesStandin, StandinServer
from tests.katalogus_world import World, client, octopoes_mutation, world

__all__ = ["world"]  # the fixture

BYTES_USER, BYTES_PASSWORD = "bytes-user", "bytes-secret"


def refuse(server: StandinServer, standin: Any) -> Callable[[], None]:
    server.down()
    return server.up


def answer_500(server: StandinServer, standin: Any) -> Callable[[], None]:
    standin.faults.status = 500
    return standin.faults.clear  # type: ignore[no-any-return]


OUTAGES = {"refused": refuse, "500": answer_500}


@pytest.fixture
def bytes_service() -> Iterator[tuple[BytesStandin, StandinServer]]:
    standin = BytesStandin(BYTES_USER, BYTES_PASSWORD)
    with StandinServer(standin.app) as server:
        yield standin, server


def api(store: Store, **urls: str) -> TestClient:
    """An API replica configured as the schedulers' processes are (it calls none of the services itself)."""
    settings = Settings(database_url=store.url, bytes_username=BYTES_USER, bytes_password=BYTES_PASSWORD, **urls)
    return TestClient(build_app(settings, store))


def world_api(world: World, bytes_url: str) -> TestClient:
    return api(
        world.store,
        katalogus_url=world.katalogus_server.url,
        octopoes_url=world.octopoes_server.url,
        bytes_url=bytes_url,
    )


def samples(client: TestClient, name: str) -> dict[str, float]:
    """The metric's samples by their `service` label."""
    text = client.get("/metrics").text
    return {
        match.group(1): float(match.group(2))
        for match in re.finditer(rf'^{name}{{service="(\w+)"}} (\S+)$', text, re.MULTILINE)
    }


def control_rows(client: TestClient) -> dict[str, dict[str, Any]]:
    plane = client.get("/ui/api/control-plane").json()
    return {row["service"]: row for row in plane["outside_services"]}


@pytest.mark.parametrize("outage", sorted(OUTAGES))
def test_katalogus_failing_degrades_ready_metrics_and_page_then_recovers(
    world: World, bytes_service: tuple[BytesStandin, StandinServer], outage: str
) -> None:
    world.katalogus.add_boefje("dns-records", ["Hostname"], enabled=True)
    world.octopoes.add_object("acme", "Hostname|internet|a.example", level=1)
    scheduler = world.boefjes()
    scheduler.tick()  # the listing (KATalogus) and the new boefje's objects (Octopoes): both answer
    with world_api(world, bytes_service[1].url) as replica:
        ready = replica.get("/ready")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        # Bytes is configured but no caller has used it yet: unknown, neither up nor degraded.
        assert ready.json()["outside_services"] == {"katalogus": "up", "octopoes": "up", "bytes": "unknown"}
        assert samples(replica, "baton_outside_service_up") == {"katalogus": 1.0, "octopoes": 1.0}

        restore = OUTAGES[outage](world.katalogus_server, world.katalogus)
        world.poll_passes()
        world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|b.example", 1))
        scheduler.tick()  # the listing fails; ingest goes on with the last catalogue

        ready = replica.get("/ready")
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "degraded" and body["database"] == world.store.dialect
        assert body["outside_services"] == {"katalogus": "down", "octopoes": "up", "bytes": "unknown"}
        [degraded] = body["degraded"]
        assert degraded["service"] == "katalogus" and degraded["down_seconds"] >= 0
        since = datetime.fromisoformat(degraded["down_since"])
        assert "reason" not in degraded  # a probe has no token: why it fails is on the status page
        assert samples(replica, "baton_outside_service_up") == {"katalogus": 0.0, "octopoes": 1.0}
        down_seconds = samples(replica, "baton_outside_service_down_seconds")
        assert down_seconds["katalogus"] >= 0 and down_seconds["octopoes"] == 0.0
        rows = control_rows(replica)
        assert rows["katalogus"]["state"] == "down"
        assert datetime.fromisoformat(rows["katalogus"]["down_since"]) == since
        reason = rows["katalogus"]["reason"]
        assert reason and ("500" in reason if outage == "500" else "500" not in reason)
        assert (rows["octopoes"]["state"], rows["bytes"]["state"]) == ("up", "unknown")
        page = replica.get("/ui/fragments/control-plane").text
        assert 'data-outside-service="katalogus" data-state="down"' in page
        assert 'data-outside-service="bytes" data-state="unknown"' in page

        world.poll_passes()
        scheduler.tick()  # still failing: the outage keeps its start
        assert replica.get("/ready").json()["degraded"][0]["down_since"] == degraded["down_since"]

        restore()
        world.poll_passes()
        scheduler.tick()  # the probe succeeds
        ready = replica.get("/ready")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready" and "degraded" not in ready.json()
        assert samples(replica, "baton_outside_service_up") == {"katalogus": 1.0, "octopoes": 1.0}
        assert samples(replica, "baton_outside_service_down_seconds") == {"katalogus": 0.0, "octopoes": 0.0}
        assert control_rows(replica)["katalogus"]["state"] == "up"
        assert 'data-outside-service="katalogus" data-state="up"' in replica.get("/ui/fragments/control-plane").text


@pytest.mark.parametrize("outage", sorted(OUTAGES))
def test_octopoes_and_bytes_failing_are_each_listed(
    world: World, bytes_service: tuple[BytesStandin, StandinServer], outage: str
) -> None:
    """Two services down at once: both listed as degraded, each with its own start; each recovers alone."""
    bytes_standin, bytes_server = bytes_service
    runs = BytesClient(client("bytes", bytes_server.url), BYTES_USER, BYTES_PASSWORD)
    for n in range(5):
        world.octopoes.add_object("acme", f"Hostname|internet|h{n}.example", level=1)
    world.katalogus.add_boefje("dns-records", ["Hostname"], enabled=True)
    scheduler = world.boefjes()
    scheduler.backfiller.page_size = 2
    try:
        scheduler.tick()  # the listing and the first page of objects
        restore_octopoes = OUTAGES[outage](world.octopoes_server, world.octopoes)
        scheduler.tick()  # the next page fails
        restore_bytes = OUTAGES[outage](bytes_server, bytes_standin)
        with pytest.raises(OutsideServiceError):
            runs.last_run("acme", "dns-records", "Hostname|internet|h0.example")
        world.link.observed(runs.http)  # as every caller of a service does after a call
        with world_api(world, bytes_server.url) as replica:
            body = replica.get("/ready").json()
            assert body["status"] == "degraded"
            assert [entry["service"] for entry in body["degraded"]] == ["octopoes", "bytes"]
            assert body["outside_services"] == {"katalogus": "up", "octopoes": "down", "bytes": "down"}
            assert samples(replica, "baton_outside_service_up") == {"katalogus": 1.0, "octopoes": 0.0, "bytes": 0.0}

            restore_bytes()
            assert runs.last_run("acme", "dns-records", "Hostname|internet|h0.example") is None
            world.link.observed(runs.http)
            body = replica.get("/ready").json()
            assert body["status"] == "degraded" and [entry["service"] for entry in body["degraded"]] == ["octopoes"]

            restore_octopoes()
            world.poll_passes()
            scheduler.tick()  # the probe: the next page of objects
            assert replica.get("/ready").json()["status"] == "ready"
            assert samples(replica, "baton_outside_service_up") == {"katalogus": 1.0, "octopoes": 1.0, "bytes": 1.0}
    finally:
        runs.http.close()


def test_without_outside_services_ready_keeps_its_shape(store: Store) -> None:
    with api(store) as replica:
        ready = replica.get("/ready")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "database": store.dialect}
        assert samples(replica, "baton_outside_service_up") == {}
        assert control_rows(replica) == {}
        assert 'data-outside="off"' in replica.get("/ui/fragments/control-plane").text


def test_a_failure_nobody_has_rechecked_for_three_polls_is_unknown_not_degraded(store: Store) -> None:
    """Octopoes failed during a backfill that then ended (the boefje was disabled): nobody calls it since,
    so its last word goes stale and no longer keeps Baton degraded."""
    poll = 60.0
    now = utcnow()
    with store.session() as session:
        record_outside_service(session, "octopoes", now - timedelta(hours=1), "connection refused", now)
        record_outside_service(session, "katalogus", None, None, now)
    with api(store, katalogus_url="http://katalogus:8000", octopoes_url="http://octopoes:80") as replica:
        assert replica.get("/ready").json()["degraded"][0]["service"] == "octopoes"
    with store.session() as session:  # the same records, written three polls and a second ago
        old = now - timedelta(seconds=3 * poll + 1)
        record_outside_service(session, "octopoes", now - timedelta(hours=1), "connection refused", old)
    with api(store, katalogus_url="http://katalogus:8000", octopoes_url="http://octopoes:80") as replica:
        body = replica.get("/ready").json()
        assert body["status"] == "ready" and "degraded" not in body
        assert body["outside_services"] == {"katalogus": "up", "octopoes": "unknown"}
        assert samples(replica, "baton_outside_service_up") == {"katalogus": 1.0}
        assert samples(replica, "baton_outside_service_checked_age_seconds")["octopoes"] > 3 * poll
        page = replica.get("/ui/fragments/control-plane").text
        assert 'data-outside-service="octopoes" data-state="unknown"' in page
        assert "it was failing: connection refused" in page
