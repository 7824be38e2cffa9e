"""Plugins enabled and disabled through KATalogus' own REST API drive a Baton scheduler's tasks and twins:
against the KATalogus stand-in and, with BATON_TEST_KATALOGUS_URL set, against OpenKAT's KATalogus run from
its source (docs/development.md), on both backends. Only KATalogus' API is used to change plugins, settings
and organisations; Octopoes is the stand-in (the real one needs XTDB)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from baton.control.leadership import DatabaseLeaseLeader
from baton.control.organisations_from_katalogus import KATALOGUS_LOCK_KEY, KATALOGUS_ROLE, KatalogusOrganisationSync
from baton.core.catalogue import KATALOGUS_SOURCE
from baton.core.model import SchedulerSpec
from baton.core.settings import Settings
from baton.ingest.catalogue.lookups import KatalogusCatalogue
from baton.ingest.events import InProcessSource
from baton.ingest.outside_links import OutsideLinks, OutsideServiceRecorder
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.openkat import KatalogusClient, OctopoesClient
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from harness.standins import OctopoesStandin, StandinServer
from tests.integration.test_katalogus_organisations import LEASES, Ticker, organisations, retired
from tests.integration.test_openkat_clients import katalogus_url
from tests.katalogus_world import POLL_SECONDS, Clock, client, octopoes_mutation, queued, run_until_idle

__all__ = ["katalogus_url"]  # the fixture: "standin" and "real"

GENERIC_IMAGE = "ghcr.io/minvws/openkat/generic:latest"  # dns-records' image, as KATalogus' source lists it
Made = tuple[str, str | None, str | None]  # a task's boefje: id, version, image


@dataclass
class Estate:
    """Organisations made through KATalogus' API (and in Baton, and the Octopoes stand-in), deleted from
    KATalogus at the end; Baton's boefje schedulers reading KATalogus at its URL."""

    store: Store
    api: httpx.Client
    link: OutsideLinks
    octopoes: OctopoesStandin
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    clock: Clock = field(default_factory=Clock)
    sources: dict[str, InProcessSource] = field(default_factory=dict)
    organisations: list[str] = field(default_factory=list)

    def organisation(self, name: str, **fields: Any) -> str:
        org = f"baton-{name}-{self.suffix}"
        assert self.api.post("/v1/organisations/", json={"id": org, "name": name, **fields}).status_code == 201
        self.organisations.append(org)
        self.octopoes.add_organisation(org)
        with self.store.session() as session:
            create_organisation(session, org, name, maxsize=1000)
        return org

    def enable(self, org: str, plugin: str, enabled: bool = True) -> None:
        answer = self.api.patch(f"/v1/organisations/{org}/plugins/{plugin}", json={"enabled": enabled})
        assert answer.status_code == 204

    def scheduler(self, org: str) -> BoefjeScheduler:
        context = SchedulerContext(
            store=self.store,
            settings=Settings(database_url=self.store.url, grace_period_seconds=3600),
            runner="test",
            location="here",
            source_factory=lambda spec: self.sources.setdefault(spec.id, InProcessSource()),
            catalogue=KatalogusCatalogue(),
            clock=self.clock,
            links=self.link,
        )
        scheduler = BoefjeScheduler(SchedulerSpec(org, BoefjeScheduler.type), context)
        scheduler.setup()
        return scheduler

    def made(self, org: str, reference: str) -> list[Made]:
        return sorted(
            (task.data["boefje"]["id"], task.data["boefje"]["version"], task.data["boefje"]["oci_image"])
            for task in queued(self.store, f"boefje-{org}")
            if task.data["input_ooi"] == reference
        )

    def scan(self, org: str, scheduler: BoefjeScheduler, host: str) -> list[Made]:
        """A scan-profile event for a new hostname; the tasks made of it."""
        reference = f"Hostname|internet|{host}"
        self.sources.setdefault(f"boefje-{org}", InProcessSource()).put(octopoes_mutation(org, reference, 2))
        run_until_idle(scheduler)
        return self.made(org, reference)


@pytest.fixture
def estate(store: Store, katalogus_url: str) -> Iterator[Estate]:
    octopoes = OctopoesStandin()
    with (
        httpx.Client(base_url=katalogus_url, timeout=10) as api,
        StandinServer(octopoes.app) as octopoes_server,
    ):
        link = OutsideLinks(
            KatalogusClient(client("katalogus", katalogus_url)),
            OctopoesClient(client("octopoes", octopoes_server.url)),
            POLL_SECONDS,
            OutsideServiceRecorder(store, POLL_SECONDS),
        )
        estate = Estate(store, api, link, octopoes)
        try:
            yield estate
        finally:
            for org in estate.organisations:
                api.delete(f"/v1/organisations/{org}")
            link.katalogus.http.close()
            link.octopoes.http.close()  # type: ignore[union-attr]


def test_plugins_enabled_through_katalogus_api_drive_the_tasks(estate: Estate) -> None:
    api, suffix = estate.api, estate.suffix
    acme, beta = estate.organisation("acme"), estate.organisation("beta")
    probe, image = f"baton-drive-{suffix}", f"ghcr.io/example/drive:2.0-{suffix}"
    boefje = {"id": probe, "name": f"Drive {suffix}", "type": "boefje", "consumes": ["Hostname"]}
    boefje |= {"scan_level": 2, "version": "2.0", "oci_image": image}
    assert api.post(f"/v1/organisations/{acme}/plugins", json=boefje).status_code == 201
    for plugin in (probe, "dns-records"):  # one made through the API, one of KATalogus' own
        estate.enable(acme, plugin)
    acme_boefjes, beta_boefjes = estate.scheduler(acme), estate.scheduler(beta)

    # Exactly the boefjes KATalogus enables for acme, with KATalogus' image and version.
    made = estate.scan(acme, acme_boefjes, "a.example")
    assert made == sorted([("dns-records", None, GENERIC_IMAGE), (probe, "2.0", image)])
    assert estate.scan(beta, beta_boefjes, "a.example") == []  # beta enabled nothing consuming hostnames

    # Disabled through the API: gone from the next event after a poll; beta enables dns-records.
    estate.enable(acme, probe, False)
    estate.enable(beta, "dns-records")
    estate.clock.advance(POLL_SECONDS)
    assert estate.scan(acme, acme_boefjes, "b.example") == [("dns-records", None, GENERIC_IMAGE)]
    assert estate.scan(beta, beta_boefjes, "b.example") == [("dns-records", None, GENERIC_IMAGE)]

    # A new version of the boefje, enabled again: its tasks carry the new image and version.
    update = {"version": "2.1", "oci_image": f"{image}-2.1"}
    assert api.patch(f"/v1/organisations/{acme}/boefjes/{probe}", json=update).status_code == 204
    estate.enable(acme, probe)
    estate.enable(acme, "dns-records", False)
    estate.clock.advance(POLL_SECONDS)
    assert estate.scan(acme, acme_boefjes, "c.example") == [(probe, "2.1", f"{image}-2.1")]


def test_twins_follow_the_duplicates_katalogus_reports(estate: Estate) -> None:
    """The boefje enabled through the API everywhere; settings put through the API. A task for acme gets a
    twin in exactly the organisations KATalogus reports as duplicates that hold the object in Octopoes:
    beta (same settings), not delta (other settings), zeta (does not deduplicate) nor gamma (no object)."""
    api, suffix = estate.api, estate.suffix
    probe, image = f"baton-twin-{suffix}", f"ghcr.io/example/twin:1-{suffix}"
    names = ["acme", "beta", "gamma", "delta", "zeta"]
    organisations = {name: estate.organisation(name, deduplicate=name != "zeta") for name in names}
    acme = organisations["acme"]
    boefje = {"id": probe, "name": f"Twin {suffix}", "type": "boefje", "consumes": ["Hostname"], "scan_level": 2}
    assert api.post(f"/v1/organisations/{acme}/plugins", json=boefje | {"oci_image": image}).status_code == 201
    for name, org in organisations.items():
        estate.enable(org, probe)
        settings = {"API_KEY": "other" if name == "delta" else "same"}
        assert api.put(f"/v1/organisations/{org}/{probe}/settings", json=settings).status_code == 200
        if name != "gamma":
            estate.octopoes.add_object(org, "Hostname|internet|shared.example", level=3)

    made = estate.scan(acme, estate.scheduler(acme), "shared.example")
    assert made == [(probe, None, image)]
    [original] = queued(estate.store, f"boefje-{acme}")
    twins = {name: queued(estate.store, f"boefje-{org}") for name, org in organisations.items() if name != "acme"}
    assert {name: len(tasks) for name, tasks in twins.items()} == {"beta": 1, "gamma": 0, "delta": 0, "zeta": 0}
    [twin] = twins["beta"]
    assert twin.data["deduplication_key"] == original.data["deduplication_key"] == str(original.id)
    assert twin.data["boefje"] == original.data["boefje"]


def test_settings_put_through_katalogus_api_decide_the_duplicates_baton_reads(estate: Estate) -> None:
    """Settings changed through KATalogus' settings API change the duplicates Baton's client reads; deleting
    them deletes the whole config (the enabled flag too)."""
    api, katalogus = estate.api, estate.link.katalogus
    acme, beta = estate.organisation("acme"), estate.organisation("beta")

    def duplicates() -> list[str]:
        [config] = katalogus.boefje_configs(acme, "dns-records")
        return [duplicate.organisation_id for duplicate in config.duplicates]

    for org in (acme, beta):
        estate.enable(org, "dns-records")
    assert duplicates() == [beta]
    settings = f"/v1/organisations/{beta}/dns-records/settings"
    assert api.put(settings, json={"RESOLVER": "9.9.9.9"}).status_code == 200
    assert api.get(settings).json() == {"RESOLVER": "9.9.9.9"}
    assert duplicates() == []
    assert api.put(f"/v1/organisations/{acme}/dns-records/settings", json={"RESOLVER": "9.9.9.9"}).status_code == 200
    assert duplicates() == [beta]
    assert api.delete(settings).status_code == 200
    assert (api.get(settings).json(), katalogus.plugin(beta, "dns-records").enabled) == ({}, False)  # type: ignore[union-attr]
    assert duplicates() == []
    assert api.delete(settings).status_code == 404


def test_organisations_made_and_deleted_through_katalogus_api_come_and_go_in_baton(estate: Estate) -> None:
    """(An empty listing retires nothing: `stays` keeps KATalogus' listing non-empty.)"""
    org, stays = f"baton-listed-{estate.suffix}", f"baton-stays-{estate.suffix}"
    settings = Settings(database_url=estate.store.url, katalogus_poll_seconds=60, queue_maxsize=10)
    leader = DatabaseLeaseLeader(estate.store, "a:1", LEASES, role=KATALOGUS_ROLE, liveness_key=KATALOGUS_LOCK_KEY)
    recorder = OutsideServiceRecorder(estate.store, 60)
    ticker = Ticker()
    sync = KatalogusOrganisationSync(
        estate.store, settings, estate.link.katalogus, recorder, leader, clock=ticker, holder="a:1"
    )
    try:
        for made in (org, stays):
            assert estate.api.post("/v1/organisations/", json={"id": made, "name": "Listed"}).status_code == 201
            estate.organisations.append(made)
        round_ = sync.step()
        assert round_ is not None and {org, stays} <= set(round_.added)
        assert organisations(estate.store)[org] == (KATALOGUS_SOURCE, 3)  # boefje, normalizer, report queues
        assert estate.api.delete(f"/v1/organisations/{org}").status_code == 200
        ticker.now += 60
        round_ = sync.step()
        assert round_ is not None and org in round_.retired  # kept, with its history; no longer scheduled
        assert org not in organisations(estate.store) and stays in organisations(estate.store)
        assert org in retired(estate.store)
    finally:
        sync.leader.release()
