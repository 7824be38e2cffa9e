"""KATalogus as the catalogue, over real HTTP against the stand-in, on both backends: the boefjes and
normalizers KATalogus enables for an organisation make its tasks (with KATalogus' image and version), one
listing per organisation per poll whatever the number of events, a disabled boefje stops within one poll,
run_on as mula honours it, and events wait for an organisation's first catalogue."""

from __future__ import annotations

import uuid
from typing import Any

from baton.core.model import SchedulerType
from baton.ingest.catalogue.plugins_file import seed_catalogue
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.storage.engine import Store
from baton.storage.scheduling.catalogue_sync import plugin_enabled_for
from baton.storage.tables import Plugin
from tests.katalogus_world import (
    PLUGINS_CALL,
    World,
    boefje_pairs,
    octopoes_mutation,
    queued,
    world,
)

__all__ = ["world"]  # the fixture

DNS_IMAGE = "ghcr.io/minvws/openkat/dns-records:1.2"


def catalogue(world: World) -> None:
    """dns and ports consume hostnames; dns is enabled for acme only, ports for nobody, whois for beta."""
    katalogus = world.katalogus
    katalogus.add_boefje("dns-records", ["Hostname"], scan_level=1, version="1.2", oci_image=DNS_IMAGE)
    katalogus.add_boefje("ports", ["Hostname", "IPAddressV4"], scan_level=1, oci_image="ghcr.io/x/ports:3")
    katalogus.add_boefje("whois", ["Hostname"], scan_level=1, oci_image="ghcr.io/x/whois:1")
    katalogus.add_normalizer("kat_dns_normalize", ["boefje/dns-records"])
    katalogus.add_normalizer("kat_off_normalize", ["boefje/dns-records"])
    katalogus.set_enabled("acme", "dns-records", True)
    katalogus.set_enabled("beta", "whois", True)
    katalogus.set_enabled("acme", "kat_off_normalize", False)


def test_a_scan_profile_event_makes_one_task_per_boefje_katalogus_enables(world: World) -> None:
    catalogue(world)
    with world.store.session() as session:  # Baton's built-in catalogue is there too, and must not run
        seed_catalogue(session, None)
    scheduler = world.boefjes()
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|a.example", 2))
    scheduler.tick()
    assert world.waiting("boefje-acme") == 0
    [task] = queued(world.store, "boefje-acme")
    assert task.data["boefje"] == {"id": "dns-records", "name": "Dns Records", "version": "1.2", "oci_image": DNS_IMAGE}
    assert task.data["input_ooi"] == "Hostname|internet|a.example"


def test_one_listing_per_poll_whatever_the_number_of_events(world: World) -> None:
    catalogue(world)
    scheduler = world.boefjes()
    for n in range(30):
        world.put("boefje-acme", octopoes_mutation("acme", f"Hostname|internet|h{n}.example", 2))
        scheduler.tick()
    assert len(queued(world.store, "boefje-acme")) == 30
    assert world.katalogus.calls[PLUGINS_CALL] == 1
    world.poll_passes()
    scheduler.tick()
    scheduler.tick()
    assert world.katalogus.calls[PLUGINS_CALL] == 2


def test_the_schedulers_of_an_organisation_share_its_listing(world: World) -> None:
    """The normalizer scheduler plans from what the boefje scheduler wrote: it never calls KATalogus."""
    catalogue(world)
    world.boefjes().tick()
    normalizers = world.scheduler(NormalizerScheduler)
    world.put("normalizer-acme", raw_file("acme", "boefje/dns-records"))
    assert normalizers.tick() == 1
    assert [task.data["normalizer"]["id"] for task in queued(world.store, "normalizer-acme")] == ["kat_dns_normalize"]
    assert world.katalogus.calls[PLUGINS_CALL] == 1


def test_a_boefje_disabled_in_katalogus_gets_no_new_tasks_after_the_next_poll(world: World) -> None:
    catalogue(world)
    scheduler = world.boefjes()
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|a.example", 2))
    scheduler.tick()
    world.katalogus.set_enabled("acme", "dns-records", False)
    world.katalogus.set_enabled("acme", "ports", True)
    world.poll_passes()
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|b.example", 2))
    scheduler.tick()
    assert boefje_pairs(world.store) == [
        ("dns-records", "Hostname|internet|a.example"),
        ("ports", "Hostname|internet|b.example"),
    ]
    with world.store.session() as session:
        assert plugin_enabled_for(session, "acme", "dns-records", by_setting_only=True) is None
        assert plugin_enabled_for(session, "acme", "ports", by_setting_only=True) is not None


def test_a_plugin_katalogus_stops_listing_is_off_and_a_changed_one_is_rewritten(world: World) -> None:
    catalogue(world)
    scheduler = world.boefjes()
    scheduler.tick()
    world.katalogus.update_boefje("dns-records", version="1.3", oci_image="ghcr.io/minvws/openkat/dns-records:1.3")
    world.katalogus.plugins.pop("whois")
    world.poll_passes()
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|a.example", 2))
    scheduler.tick()
    [task] = queued(world.store, "boefje-acme")
    assert task.data["boefje"]["version"] == "1.3"
    assert task.data["boefje"]["oci_image"] == "ghcr.io/minvws/openkat/dns-records:1.3"
    with world.store.session() as session:
        plugin = session.get(Plugin, "dns-records")
        assert plugin is not None and plugin.version == "1.3"


def test_an_organisation_katalogus_enables_nothing_for_gets_no_tasks(world: World) -> None:
    catalogue(world)
    world.katalogus.set_enabled("beta", "whois", False)
    scheduler = world.boefjes("beta")
    world.put("boefje-beta", octopoes_mutation("beta", "Hostname|internet|a.example", 4))
    assert scheduler.tick() == 1  # the event is handled: it makes no task
    assert queued(world.store, "boefje-beta") == []


def test_run_on_boefjes_run_on_the_operations_they_list_only(world: World) -> None:
    world.katalogus.add_boefje("on-create", ["Hostname"], run_on=["create"], enabled=True)
    world.katalogus.add_boefje("on-update", ["Hostname"], run_on=["update"], enabled=True)
    world.katalogus.add_boefje("always", ["Hostname"], enabled=True)
    scheduler = world.boefjes()
    world.put(
        "boefje-acme",
        octopoes_mutation("acme", "Hostname|internet|new.example", 1, "create"),
        octopoes_mutation("acme", "Hostname|internet|old.example", 1, "update"),
    )
    scheduler.tick()
    assert boefje_pairs(world.store) == [
        ("always", "Hostname|internet|new.example"),
        ("always", "Hostname|internet|old.example"),
        ("on-create", "Hostname|internet|new.example"),
        ("on-update", "Hostname|internet|old.example"),
    ]
    with world.store.session() as session:
        plugin = session.get(Plugin, "on-create")
        assert plugin is not None and plugin.run_on == ["create"]  # for the rescans: no schedule


def test_events_wait_for_an_organisations_first_catalogue(world: World) -> None:
    catalogue(world)
    world.katalogus_server.down()
    scheduler = world.boefjes()
    normalizers = world.scheduler(NormalizerScheduler)
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|a.example", 2))
    world.put("normalizer-acme", raw_file("acme", "boefje/dns-records"))
    assert scheduler.tick() == 0 and normalizers.tick() == 0
    assert world.waiting("boefje-acme") == 1 and world.waiting("normalizer-acme") == 1
    world.katalogus_server.up()
    world.poll_passes()  # the failed read is tried again a poll later
    scheduler.tick()
    assert normalizers.tick() == 1
    assert world.waiting("boefje-acme") == 0
    assert boefje_pairs(world.store) == [("dns-records", "Hostname|internet|a.example")]
    assert len(queued(world.store, "normalizer-acme")) == 1


def test_without_katalogus_the_builtin_catalogue_still_plans(store: Store) -> None:
    """The same planner with no link: Baton's own catalogue, no outside call (today's behaviour)."""
    from baton.core.model import SchedulerSpec
    from baton.core.settings import Settings
    from baton.ingest.events import InProcessSource
    from baton.ingest.planners.boefje import BoefjeScheduler
    from baton.ingest.scheduler import SchedulerContext
    from baton.storage.control.organisations import create_organisation

    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=10)
        seed_catalogue(session, None)
    source = InProcessSource()
    context = SchedulerContext(store, Settings(database_url=store.url), "test", "here", source_factory=lambda _: source)
    scheduler = BoefjeScheduler(SchedulerSpec("acme", SchedulerType.BOEFJE), context)
    scheduler.setup()
    source.put(octopoes_mutation("acme", "Hostname|internet|a.example", 4))
    assert scheduler.tick() == 1
    assert queued(store, "boefje-acme"), "the built-in catalogue's boefjes made no task"


def raw_file(org: str, mime: str) -> dict[str, Any]:
    """A raw file as Bytes publishes it on `raw_file_received`."""
    return {
        "created_at": "2026-01-01T10:00:02Z",
        "organization": org,
        "raw_data": {
            "id": str(uuid.uuid4()),
            "boefje_meta": {
                "id": str(uuid.uuid4()),
                "boefje": {"id": "dns-records", "version": None},
                "input_ooi": "Hostname|internet|a.example",
                "organization": org,
            },
            "mime_types": [{"value": mime}],
        },
    }
