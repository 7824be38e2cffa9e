"""A person's run first: rocky pushes a manual boefje run with priority 1, and it pops before every task
Baton planned by itself, of any organisation, under the fair pop. On both backends, through the API."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from baton.core.model import SchedulerSpec, SchedulerType
from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import PluginSpec
from baton.ingest.events import InProcessSource
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.engine import Store
from baton.storage.scheduling.plugins import seed_plugins

DNS = PluginSpec(id="dns-records", type="boefje", name="DNS", consumes=["Hostname"], scan_level=1)


def plan(store: Store, org: str, count: int) -> None:
    """`count` automatic boefje tasks of `org`, made by its scheduler from scan-profile events."""
    source = InProcessSource()
    context = SchedulerContext(store, Settings(database_url=store.url), "test", "here", source_factory=lambda _: source)
    scheduler = BoefjeScheduler(SchedulerSpec(org, SchedulerType.BOEFJE), context)
    scheduler.setup()
    for n in range(count):
        source.put(
            {
                "type": "scan_profile_mutation",
                "object": {"primary_key": f"Hostname|internet|{org}{n}", "object_type": "Hostname", "scan_level": 2},
            }
        )
    while scheduler.tick():
        pass


def manual_run(org: str) -> dict[str, Any]:
    """A manual boefje run as rocky pushes it."""
    return {
        "scheduler_id": "boefje",
        "organisation": org,
        "priority": 1,
        "data": {
            "boefje": {"id": "dns-records", "name": "DNS", "version": None},
            "input_ooi": "Hostname|internet|by-hand",
            "organization": org,
        },
    }


def test_a_manual_run_pops_before_the_automatic_tasks_of_every_organisation(client: TestClient, store: Store) -> None:
    with store.session() as session:
        seed_plugins(session, [DNS.model_dump()])
    for org in ("busy", "acme", "beta"):
        client.post("/organisations", json={"id": org, "name": org}).raise_for_status()
    # busy has the most work queued (its fair-queuing tags are far ahead), acme and beta a little.
    plan(store, "busy", 20)
    plan(store, "acme", 3)
    plan(store, "beta", 3)
    assert client.post("/schedulers/boefje/push", json=manual_run("busy")).status_code == 201
    [first] = client.post("/schedulers/boefje/pop", params={"limit": 1}).json()["results"]
    assert (first["organisation"], first["priority"], first["data"]["input_ooi"]) == (
        "busy",
        1,
        "Hostname|internet|by-hand",
    )
    rest = client.post("/schedulers/boefje/pop", params={"limit": 100}).json()["results"]
    assert len(rest) == 26 and all(task["priority"] >= 2 for task in rest)
    # Among the automatic tasks the fair pop still takes turns: acme and beta do not wait behind busy.
    assert {task["organisation"] for task in rest[:3]} == {"busy", "acme", "beta"}
