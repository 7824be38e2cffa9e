"""An organisation KATalogus stops listing is retired, never deleted (storage/control/organisation_sync.py), on
both backends: its tasks and schedules stay readable through Baton's and OpenKAT's reads, its queues take
and hand out nothing, its schedulers stop and are not claimed again (director and workers), and when
KATalogus lists it again it comes back with its history. Deleting is an operator's explicit
`DELETE /organisations/{id}`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from baton.control.housekeeping import Housekeeping
from baton.control.leadership import DatabaseLeaseLeader
from baton.control.organisations_from_katalogus import KATALOGUS_LOCK_KEY, KATALOGUS_ROLE, KatalogusOrganisationSync
from baton.core.catalogue import RETIRED_TASK_REASON
from baton.core.model import TaskStatus, utcnow
from baton.core.settings import LeaseSettings, Settings
from baton.ingest.ownership import Ownership
from baton.openkat import KatalogusClient
from baton.storage.control import scheduler_leases
from baton.storage.control import workers as worker_rows
from baton.storage.control.organisation_sync import retire_organisations
from baton.storage.control.scheduler_rows import all_specs
from baton.storage.engine import Store
from baton.storage.tables import Organisation, Task
from harness.factories import add_organisation
from harness.standins import KatalogusStandin, StandinServer
from tests.katalogus_world import client as katalogus_client

# Long enough that no lease ends during a test on a loaded machine: nothing here waits for one to end.
LEASES = LeaseSettings(lease_seconds=60, renew_deadline_seconds=40, retry_period_seconds=0.1)


class Ticker:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def katalogus() -> Iterator[tuple[KatalogusStandin, StandinServer]]:
    standin = KatalogusStandin()
    with StandinServer(standin.app) as server:
        yield standin, server


class Estate:
    """KATalogus (the stand-in) with its organisation sync, and Baton's API as OpenKAT calls it."""

    def __init__(self, store: Store, server: StandinServer, standin: KatalogusStandin, api: TestClient) -> None:
        self.store, self.standin, self.api = store, standin, api
        self.ticker = Ticker()
        settings = Settings(database_url=store.url, katalogus_poll_seconds=60, queue_maxsize=10)
        leader = DatabaseLeaseLeader(store, "a:1", LEASES, role=KATALOGUS_ROLE, liveness_key=KATALOGUS_LOCK_KEY)
        katalogus = KatalogusClient(katalogus_client("katalogus", server.url))
        self.sync = KatalogusOrganisationSync(store, settings, katalogus, None, leader, clock=self.ticker, holder="a:1")

    def poll(self) -> Any:
        self.ticker.now += 60
        round_ = self.sync.step()
        assert round_ is not None
        return round_


@pytest.fixture
def estate(store: Store, client: TestClient, katalogus: tuple[KatalogusStandin, StandinServer]) -> Iterator[Estate]:
    standin, server = katalogus
    standin.add_organisation("stays")  # (a listing without any organisation retires none)
    standin.add_organisation("acme")
    world = Estate(store, server, standin, client)
    try:
        assert world.poll().added == ["acme", "stays"]
        yield world
    finally:
        world.sync.leader.release()


def rocky_push(ooi: str) -> dict[str, Any]:
    job = {
        "id": None,
        "boefje": {"id": "dns-records", "name": "DNS records", "version": None, "oci_image": None},
        "input_ooi": ooi,
        "organization": "acme",
        "deduplication_key": None,
    }
    return {"scheduler_id": "boefje", "organisation": "acme", "priority": 1, "data": job}


def acme_tasks(api: TestClient) -> dict[str, dict[str, Any]]:
    """As rocky's task list reads them."""
    page = api.get("/tasks", params={"scheduler_id": "boefje", "organisation": "acme", "limit": 100})
    assert page.status_code == 200, page.text
    return {task["data"]["input_ooi"]: task for task in page.json()["results"]}


def test_an_organisation_katalogus_drops_is_retired_with_its_history_and_comes_back(estate: Estate) -> None:
    api = estate.api
    for ooi in ("Hostname|internet|running.example", "Hostname|internet|queued.example"):
        assert api.post("/schedulers/boefje/push", json=rocky_push(ooi)).status_code == 201
    [running] = api.post("/schedulers/boefje/pop", params={"limit": 1}).json()["results"]
    assert api.patch(f"/tasks/{running['id']}", json={"status": "running"}).status_code == 200
    report = {"organisation_id": "acme", "report_recipe_id": str(uuid.uuid4())}
    scheduled = api.post(
        "/schedules", json={"scheduler_id": "report", "organisation": "acme", "data": report, "schedule": "0 3 * * *"}
    )
    assert scheduled.status_code == 201, scheduled.text
    schedules_before = api.get("/schedules", params={"organisation": "acme"}).json()["count"]
    assert schedules_before == 3  # the two boefje tasks' and the report's

    estate.standin.remove_organisation("acme")
    assert estate.poll().retired == ["acme"]

    organisation = api.get("/organisations/acme")
    assert organisation.status_code == 200 and organisation.json()["retired_at"] is not None
    tasks = acme_tasks(api)  # rocky's task list still shows them
    assert tasks["Hostname|internet|running.example"]["status"] == "running"
    queued = tasks["Hostname|internet|queued.example"]
    assert queued["status"] == "cancelled"  # nothing left to hand out
    assert api.get(f"/tasks/{queued['id']}").json()["reason"] == RETIRED_TASK_REASON
    assert api.get(f"/tasks/{running['id']}").json()["status"] == "running"
    assert api.get("/schedules", params={"organisation": "acme"}).json()["count"] == schedules_before
    assert api.get("/tasks/stats", params={"organisation_id": "acme"}).status_code == 200

    # Its queues take and hand out nothing; the scan in progress may still end.
    assert api.post("/queues/boefje-acme/push", json={"priority": 1, "data": {"n": 1}}).status_code == 409
    refused = api.post("/schedulers/boefje/push", json=rocky_push("Hostname|internet|late.example"))
    assert refused.status_code == 409, refused.text
    assert api.post("/queues/boefje-acme/pop").json() is None
    assert api.post("/schedulers/boefje/pop").json()["results"] == []
    assert api.patch(f"/tasks/{running['id']}", json={"status": "completed"}).status_code == 200
    with estate.store.session() as session:
        assert {spec.organisation for spec in all_specs(session)} == {"stays"}

    estate.standin.add_organisation("acme")
    assert estate.poll().restored == ["acme"]
    assert api.get("/organisations/acme").json()["retired_at"] is None
    with estate.store.session() as session:
        assert {spec.organisation for spec in all_specs(session)} == {"acme", "stays"}
    again = api.post("/schedulers/boefje/push", json=rocky_push("Hostname|internet|queued.example"))
    assert again.status_code == 201, again.text
    assert len(api.get("/tasks", params={"organisation": "acme"}).json()["results"]) == 3  # its history, and more
    assert api.get("/schedules", params={"organisation": "acme"}).json()["count"] == schedules_before


def test_a_retired_organisation_is_not_retired_again_nor_by_an_empty_listing(estate: Estate) -> None:
    estate.standin.remove_organisation("acme")
    assert estate.poll().retired == ["acme"]
    assert estate.poll().retired == []  # once
    estate.standin.remove_organisation("stays")
    assert estate.poll().retired == []  # an empty listing retires nothing


def test_an_operator_deletes_an_organisation_with_its_data_through_baton_only(estate: Estate) -> None:
    """`DELETE /organisations/{id}` is the explicit delete; KATalogus still lists it, so it comes back
    empty at the next poll."""
    api = estate.api
    assert api.post("/schedulers/boefje/push", json=rocky_push("Hostname|internet|a.example")).status_code == 201
    assert api.delete("/organisations/acme").status_code == 204
    assert api.get("/organisations/acme").status_code == 404
    assert estate.poll().added == ["acme"]
    assert acme_tasks(api) == {}


def test_the_schedulers_of_a_retired_organisation_stop_and_are_not_claimed_again(store: Store) -> None:
    """A worker's renewal tells it the claims it lost at retirement; no claim takes them back, and the
    workers' fair share counts them out."""
    add_organisation(store, "acme")
    add_organisation(store, "globex")
    ownership = Ownership(store, LEASES, owner="w#1")
    claims = ownership.claim(["boefje-acme", "normalizer-acme", "boefje-globex"])
    lost: list[str] = []

    class Lessee:
        def __init__(self, name: str) -> None:
            self.name = name

        def lease_lost(self, reason: str) -> None:
            lost.append(self.name)

        def set_enabled(self, enabled: bool) -> None:
            return None

    for scheduler_id, claim in claims.items():
        ownership.hold(claim, Lessee(scheduler_id))
    with store.session() as session:
        assert retire_organisations(session, ["acme"], utcnow()) == ["acme"]
    ownership.renew()
    assert sorted(lost) == ["boefje-acme", "normalizer-acme"]
    assert [claim.scheduler_id for claim in ownership.held()] == ["boefje-globex"]
    with store.session() as session:
        assert worker_rows.count_schedulers(session) == 3
        taken = scheduler_leases.claim_unowned(session, "w:2#b", 10, LEASES.lease_seconds)
        assert sorted(claim.scheduler_id for claim in taken) == ["normalizer-globex", "report-globex"]
        assert scheduler_leases.claim_schedulers(session, ["boefje-acme"], "w:2#b", LEASES.lease_seconds) == []
        assert {spec.organisation for spec in all_specs(session)} == {"globex"}


def test_a_task_that_comes_back_to_a_retired_queue_is_cancelled_by_the_next_housekeeping_round(
    store: Store, client: TestClient
) -> None:
    """A runner hands back a task of a retired organisation (OpenKAT's do on shutdown): the next round
    cancels it, before anyone pops it; an operator cannot requeue one either."""
    client.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
    for n in range(2):
        client.post("/queues/boefje-acme/push", json={"priority": 1, "data": {"n": n}}).raise_for_status()
    held, failed = client.post("/queues/boefje-acme/pop").json(), client.post("/queues/boefje-acme/pop").json()
    assert client.patch(f"/tasks/{failed['id']}", json={"status": "failed"}).status_code == 200
    with store.session() as session:
        assert retire_organisations(session, ["acme"], utcnow()) == ["acme"]
    assert client.patch(f"/tasks/{held['id']}", json={"status": "queued"}).status_code == 200
    assert client.post(f"/ui/api/tasks/{failed['id']}/requeue").status_code == 409
    Housekeeping(store, Settings(database_url=store.url)).round()
    with store.session() as session:
        statuses = {str(row.id): (row.status, row.reason) for row in session.scalars(select(Task))}
        assert session.get(Organisation, "acme") is not None
    assert statuses[held["id"]] == (TaskStatus.CANCELLED.value, RETIRED_TASK_REASON)
    assert statuses[failed["id"]][0] == TaskStatus.FAILED.value
    assert client.post("/queues/boefje-acme/pop").json() is None
