"""Baton's built-in catalogue (no KATalogus): every boefje carries the container image OpenKAT's own
manifest gives it, so the tasks Baton plans reach OpenKAT's runners started with `--images`
(`BOEFJES_IMAGES`), which pop with a filter on `data.boefje.oci_image`. On both backends."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import update

from baton.core.model import SchedulerSpec, SchedulerType
from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import BUILTIN_CATALOGUE, load_catalogue_file, seed_catalogue
from baton.ingest.events import InProcessSource
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.scheduling.plugins import set_enabled_for_organisation
from baton.storage.tables import Plugin
from tests.katalogus_world import octopoes_mutation, queued

# From OpenKAT's boefje manifests (boefjes/boefjes/plugins/*/boefje.json, v1.20.1).
GENERIC = "ghcr.io/minvws/openkat/generic:latest"


def builtin_boefjes() -> list[tuple[str, str | None, list[str]]]:
    """(id, image, consumes) of every boefje in the built-in catalogue."""
    return [
        (spec.id, spec.oci_image, spec.consumes)
        for spec in load_catalogue_file(BUILTIN_CATALOGUE)
        if spec.type == "boefje"
    ]


def test_every_builtin_boefje_has_the_image_of_openkats_manifest() -> None:
    boefjes = {boefje_id: image for boefje_id, image, _ in builtin_boefjes()}
    assert boefjes, "the built-in catalogue has no boefje"
    assert {boefje_id for boefje_id, image in boefjes.items() if not image} == set()
    assert boefjes["dns-records"] == GENERIC


def test_a_task_from_the_builtin_catalogue_reaches_a_runner_started_with_its_image(
    store: Store, client: TestClient
) -> None:
    """One task per built-in boefje (each enabled, an object of a type it consumes at level 4); a pop
    filtered on an image, as OpenKAT's runner sends it, hands out exactly the tasks of that image."""
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=100)
        seed_catalogue(session, None)
        for boefje_id, _, _ in builtin_boefjes():
            set_enabled_for_organisation(session, "acme", boefje_id, True)
    source = InProcessSource()
    context = SchedulerContext(store, Settings(database_url=store.url), "test", "here", source_factory=lambda _: source)
    scheduler = BoefjeScheduler(SchedulerSpec("acme", SchedulerType.BOEFJE), context)
    scheduler.setup()
    expected: dict[str, set[str]] = {}
    for boefje_id, image, consumes in builtin_boefjes():
        assert image is not None
        source.put(octopoes_mutation("acme", f"{consumes[0]}|internet|{boefje_id}.example", 4))
        expected.setdefault(image, set())
    while scheduler.tick():
        pass
    jobs = [task.data for task in queued(store, "boefje-acme")]
    assert {job["boefje"]["id"] for job in jobs} >= {boefje_id for boefje_id, _, _ in builtin_boefjes()}
    for job in jobs:
        expected[job["boefje"]["oci_image"]].add(job["id"])
    for image, task_ids in expected.items():
        image_filter = {"column": "data", "field": "boefje__oci_image", "operator": "in", "value": [image]}
        only_this_image = {"filters": [image_filter]}
        popped = client.post("/schedulers/boefje/pop", params={"limit": 1000}, json=only_this_image)
        assert popped.status_code == 200, popped.text
        assert {task["data"]["id"] for task in popped.json()["results"]} == task_ids
        assert {task["data"]["boefje"]["oci_image"] for task in popped.json()["results"]} == {image}


def test_seeding_gives_an_existing_builtin_boefje_its_image_and_keeps_one_set_by_hand(store: Store) -> None:
    """An installation seeded before the images were in the catalogue gets them at its next start; an
    image an operator set (`PATCH /plugins/{id}`) stays."""
    with store.session() as session:
        seed_catalogue(session, None)
        session.execute(update(Plugin).values(oci_image=None))
        session.execute(update(Plugin).where(Plugin.id == "dns-zone").values(oci_image="registry.example/dns-zone:7"))
    with store.session() as session:
        seed_catalogue(session, None)
    with store.session() as session:
        images = {plugin.id: plugin.oci_image for plugin in session.query(Plugin).filter(Plugin.type == "boefje")}
    assert images["dns-records"] == GENERIC
    assert images["dns-zone"] == "registry.example/dns-zone:7"
    assert None not in images.values()
