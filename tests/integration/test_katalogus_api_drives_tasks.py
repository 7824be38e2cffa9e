"""Plugins enabled and disabled through KATalogus' own REST API drive a Baton scheduler's tasks: against the
KATalogus stand-in and, with BATON_TEST_KATALOGUS_URL set, against OpenKAT's KATalogus run from its source
(docs/development.md), on both backends. Only KATalogus' API is used to change plugins; Octopoes is the
stand-in (the real one needs XTDB)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from baton.core.model import SchedulerSpec
from baton.core.settings import Settings
from baton.ingest.events import InProcessSource
from baton.ingest.katalogus import KatalogusCatalogue, KatalogusLink
from baton.ingest.outside_services import OutsideServiceRecorder
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.openkat import KatalogusClient, OctopoesClient
from baton.storage.engine import Store
from baton.storage.organisations import create_organisation
from harness.standins import OctopoesStandin, StandinServer
from tests.integration.test_openkat_clients import katalogus_url
from tests.katalogus_world import POLL_SECONDS, Clock, client, octopoes_mutation, queued

__all__ = ["katalogus_url"]  # the fixture: "standin" and "real"

GENERIC_IMAGE = "ghcr.io/minvws/openkat/generic:latest"  # dns-records' image, as KATalogus' source lists it


@pytest.fixture
def api(katalogus_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=katalogus_url, timeout=10) as api:
        yield api


def test_plugins_enabled_through_katalogus_api_drive_the_tasks(
    store: Store, katalogus_url: str, api: httpx.Client
) -> None:
    suffix = uuid.uuid4().hex[:8]
    acme, beta, probe = f"baton-acme-{suffix}", f"baton-beta-{suffix}", f"baton-drive-{suffix}"
    image = f"ghcr.io/example/drive:2.0-{suffix}"
    octopoes = OctopoesStandin()
    clock = Clock()
    sources: dict[str, InProcessSource] = {}
    try:
        for org in (acme, beta):
            assert api.post("/v1/organisations/", json={"id": org, "name": org}).status_code == 201
            octopoes.add_organisation(org)
            with store.session() as session:
                create_organisation(session, org, org, maxsize=1000)
        boefje = {"id": probe, "name": f"Drive {suffix}", "type": "boefje", "consumes": ["Hostname"]}
        boefje |= {"scan_level": 2, "version": "2.0", "oci_image": image}
        assert api.post(f"/v1/organisations/{acme}/plugins", json=boefje).status_code == 201
        for plugin in (probe, "dns-records"):  # one made through the API, one of KATalogus' own
            assert api.patch(f"/v1/organisations/{acme}/plugins/{plugin}", json={"enabled": True}).status_code == 204

        with StandinServer(octopoes.app) as octopoes_server:
            link = KatalogusLink(
                KatalogusClient(client("katalogus", katalogus_url)),
                OctopoesClient(client("octopoes", octopoes_server.url)),
                POLL_SECONDS,
                OutsideServiceRecorder(store, POLL_SECONDS),
            )
            context = SchedulerContext(
                store=store,
                settings=Settings(database_url=store.url, grace_period_seconds=3600),
                runner="test",
                location="here",
                source_factory=lambda spec: sources.setdefault(spec.id, InProcessSource()),
                catalogue=KatalogusCatalogue(),
                clock=clock,
                katalogus=link,
            )

            def scheduler(org: str) -> BoefjeScheduler:
                made = BoefjeScheduler(SchedulerSpec(org, BoefjeScheduler.type), context)
                made.setup()
                return made

            def scan(org: str, made: BoefjeScheduler, host: str) -> list[tuple[str, str | None, str | None]]:
                """A scan-profile event for a new hostname; the tasks it made, as (boefje, version, image)."""
                before = {task.id for task in queued(store, f"boefje-{org}")}
                sources.setdefault(f"boefje-{org}", InProcessSource()).put(
                    octopoes_mutation(org, f"Hostname|internet|{host}", 2)
                )
                made.tick()
                return sorted(
                    (task.data["boefje"]["id"], task.data["boefje"]["version"], task.data["boefje"]["oci_image"])
                    for task in queued(store, f"boefje-{org}")
                    if task.id not in before and task.data["input_ooi"] == f"Hostname|internet|{host}"
                )

            acme_boefjes, beta_boefjes = scheduler(acme), scheduler(beta)
            # Exactly the boefjes KATalogus enables for acme, with KATalogus' image and version.
            assert scan(acme, acme_boefjes, "a.example") == sorted(
                [("dns-records", None, GENERIC_IMAGE), (probe, "2.0", image)]
            )
            assert scan(beta, beta_boefjes, "a.example") == []  # beta enabled nothing consuming hostnames

            # Disabled through the API: gone from the next event after a poll; beta enables dns-records.
            assert api.patch(f"/v1/organisations/{acme}/plugins/{probe}", json={"enabled": False}).status_code == 204
            patch = {"enabled": True}
            assert api.patch(f"/v1/organisations/{beta}/plugins/dns-records", json=patch).status_code == 204
            clock.advance(POLL_SECONDS)
            assert scan(acme, acme_boefjes, "b.example") == [("dns-records", None, GENERIC_IMAGE)]
            assert scan(beta, beta_boefjes, "b.example") == [("dns-records", None, GENERIC_IMAGE)]

            # A new version of the boefje, enabled again: its tasks carry the new image and version.
            update = {"version": "2.1", "oci_image": f"{image}-2.1"}
            assert api.patch(f"/v1/organisations/{acme}/boefjes/{probe}", json=update).status_code == 204
            assert api.patch(f"/v1/organisations/{acme}/plugins/{probe}", json={"enabled": True}).status_code == 204
            assert (
                api.patch(f"/v1/organisations/{acme}/plugins/dns-records", json={"enabled": False}).status_code == 204
            )
            clock.advance(POLL_SECONDS)
            assert scan(acme, acme_boefjes, "c.example") == [(probe, "2.1", f"{image}-2.1")]
            link.katalogus.http.close()
            link.octopoes.http.close()  # type: ignore[union-attr]
    finally:
        for org in (acme, beta):
            api.delete(f"/v1/organisations/{org}")


def test_settings_put_through_katalogus_api_decide_the_duplicates_baton_reads(
    katalogus_url: str, api: httpx.Client
) -> None:
    """Twins are the organisations whose settings of the boefje are identical: settings changed through
    KATalogus' settings API change the duplicates Baton's client reads; deleting them deletes the whole
    config (the enabled flag too)."""
    suffix = uuid.uuid4().hex[:8]
    acme, beta = f"baton-acme-{suffix}", f"baton-beta-{suffix}"
    katalogus = KatalogusClient(client("katalogus", katalogus_url))

    def duplicates() -> list[str]:
        [config] = katalogus.boefje_configs(acme, "dns-records")
        return [duplicate.organisation_id for duplicate in config.duplicates]

    try:
        for org in (acme, beta):
            assert api.post("/v1/organisations/", json={"id": org, "name": org}).status_code == 201
            assert api.patch(f"/v1/organisations/{org}/plugins/dns-records", json={"enabled": True}).status_code == 204
        assert duplicates() == [beta]
        settings = f"/v1/organisations/{beta}/dns-records/settings"
        assert api.put(settings, json={"RESOLVER": "9.9.9.9"}).status_code == 200
        assert api.get(settings).json() == {"RESOLVER": "9.9.9.9"}
        assert duplicates() == []
        assert (
            api.put(f"/v1/organisations/{acme}/dns-records/settings", json={"RESOLVER": "9.9.9.9"}).status_code == 200
        )
        assert duplicates() == [beta]
        assert api.delete(settings).status_code == 200
        assert (api.get(settings).json(), katalogus.plugin(beta, "dns-records").enabled) == ({}, False)  # type: ignore[union-attr]
        assert duplicates() == []
        assert api.delete(settings).status_code == 404
    finally:
        for org in (acme, beta):
            api.delete(f"/v1/organisations/{org}")
        katalogus.http.close()
