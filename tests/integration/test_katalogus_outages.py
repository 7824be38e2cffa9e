"""KATalogus or Octopoes down (connections refused) or answering 500, over real HTTP against the stand-ins,
on both backends: Baton keeps planning with the last catalogue, logs one line when the outage starts and
one when it ends (no traceback per attempt), records the state where every process reads it, tries once
per poll per process meanwhile, and catches up when the service answers again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from baton.storage.scheduling.backfills import backfills
from baton.storage.scheduling.service_states import outside_services
from tests.katalogus_world import (
    OBJECTS_CALL,
    PLUGINS_CALL,
    World,
    boefje_pairs,
    octopoes_mutation,
    run_until_idle,
    world,
)

__all__ = ["world"]  # the fixture


def refuse(world: World, server: str) -> Callable[[], None]:
    getattr(world, f"{server}_server").down()
    return getattr(world, f"{server}_server").up


def answer_500(world: World, server: str) -> Callable[[], None]:
    standin = getattr(world, server)
    standin.faults.status = 500
    return standin.faults.clear


OUTAGES = {"refused": refuse, "500": answer_500}


def outage_lines(logs: list[dict[str, Any]], service: str) -> list[tuple[str, str]]:
    return [
        (line["log_level"], line["event"])
        for line in logs
        if line["event"].startswith("outside service") and line.get("service") == service
    ]


def tracebacks(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in logs if line["log_level"] in ("error", "critical") or line.get("exc_info")]


def service_state(world: World, service: str) -> tuple[bool, str | None]:
    with world.store.session() as session:
        [state] = [row for row in outside_services(session) if row.service == service]
        return state.down, state.reason


@pytest.mark.parametrize("outage", sorted(OUTAGES))
def test_katalogus_failing_keeps_the_last_catalogue_and_catches_up(world: World, outage: str) -> None:
    world.katalogus.add_boefje("dns-records", ["Hostname"], oci_image="ghcr.io/x/dns:1", enabled=True)
    world.katalogus.add_boefje("ports", ["Hostname"], oci_image="ghcr.io/x/ports:1")
    scheduler = world.boefjes()
    scheduler.tick()
    assert service_state(world, "katalogus") == (False, None)
    with capture_logs() as logs:
        restore = OUTAGES[outage](world, "katalogus")
        for n in range(3):  # three polls into the outage: ingest goes on with the last catalogue
            world.poll_passes()
            world.put("boefje-acme", octopoes_mutation("acme", f"Hostname|internet|h{n}.example", 1))
            scheduler.tick()
        down, reason = service_state(world, "katalogus")
        assert down and reason is not None and ("500" in reason if outage == "500" else reason)
        world.katalogus.set_enabled("acme", "ports", True)  # enabled while Baton cannot see it
        restore()
        world.poll_passes()
        world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|after.example", 1))
        scheduler.tick()
    assert outage_lines(logs, "katalogus") == [
        ("warning", "outside service failing"),
        ("info", "outside service answering again"),
    ]
    assert tracebacks(logs) == []
    assert service_state(world, "katalogus") == (False, None)
    assert boefje_pairs(world.store) == [
        ("dns-records", "Hostname|internet|after.example"),
        ("dns-records", "Hostname|internet|h0.example"),
        ("dns-records", "Hostname|internet|h1.example"),
        ("dns-records", "Hostname|internet|h2.example"),
        ("ports", "Hostname|internet|after.example"),
    ]


def test_while_katalogus_fails_one_scheduler_per_process_tries_it_once_per_poll(world: World) -> None:
    world.katalogus.add_boefje("dns-records", ["Hostname"], enabled=True)
    schedulers = [world.boefjes("acme"), world.boefjes("beta")]
    for scheduler in schedulers:
        scheduler.tick()
    world.katalogus.faults.status = 500
    world.poll_passes()
    schedulers[0].tick()  # finds the outage: one call and its retry
    before = world.katalogus.calls[PLUGINS_CALL]
    for _ in range(5):  # within the same poll: the process does not try again
        for scheduler in schedulers:
            scheduler.tick()
    assert world.katalogus.calls[PLUGINS_CALL] == before
    world.poll_passes()
    for scheduler in schedulers:
        scheduler.tick()
    assert world.katalogus.calls[PLUGINS_CALL] == before + 2  # one probe (and its one retry) for both
    world.katalogus.faults.clear()
    world.poll_passes()
    for scheduler in schedulers:
        scheduler.tick()  # the probe succeeds, then the other one reads its listing too
    schedulers[0].tick()
    assert world.katalogus.calls[PLUGINS_CALL] == before + 4


def test_a_listing_without_any_plugin_keeps_the_last_catalogue(world: World) -> None:
    """KATalogus always lists its own plugins: an empty listing is a broken KATalogus. Taken at its word it
    would disable everything, and make every boefje "new" (a backfill of every object) when it recovers."""
    world.katalogus.add_boefje("dns-records", ["Hostname"], enabled=True)
    schedulers = [world.boefjes("acme"), world.boefjes("beta")]
    for scheduler in schedulers:
        scheduler.tick()
    objects_listed = world.octopoes.calls[OBJECTS_CALL]
    plugins = dict(world.katalogus.plugins)
    with capture_logs() as logs:
        world.katalogus.plugins.clear()
        for n in range(2):
            world.poll_passes()
            world.put("boefje-acme", octopoes_mutation("acme", f"Hostname|internet|h{n}.example", 1))
            for scheduler in schedulers:
                scheduler.tick()
        world.katalogus.plugins.update(plugins)
        world.poll_passes()
        for scheduler in schedulers:
            scheduler.tick()
    assert boefje_pairs(world.store) == [("dns-records", f"Hostname|internet|h{n}.example") for n in range(2)]
    assert [(line["log_level"], line["event"]) for line in logs if "lists" in line["event"]] == [
        ("warning", "KATalogus lists no plugin; organisations keep their last catalogue"),
        ("info", "KATalogus lists plugins again"),
    ]
    assert world.octopoes.calls[OBJECTS_CALL] == objects_listed  # nothing taken for newly enabled


@pytest.mark.parametrize("outage", sorted(OUTAGES))
def test_octopoes_failing_leaves_the_new_boefjes_cursor_and_resumes(world: World, outage: str) -> None:
    for n in range(10):
        world.octopoes.add_object("acme", f"Hostname|internet|h{n}.example", level=2)
    world.katalogus.add_boefje("dns-records", ["Hostname"], scan_level=1, enabled=True)
    scheduler = world.boefjes()
    scheduler.backfiller.page_size = 3
    with capture_logs() as logs:
        scheduler.tick()  # the listing and the first page
        restore = OUTAGES[outage](world, "octopoes")
        run_until_idle(scheduler)
        with world.store.session() as session:
            [cursor] = backfills(session, "acme")
        assert cursor.next_offset == 3
        assert service_state(world, "octopoes")[0]
        restore()
        world.poll_passes()
        run_until_idle(scheduler)
    assert outage_lines(logs, "octopoes") == [
        ("warning", "outside service failing"),
        ("info", "outside service answering again"),
    ]
    assert tracebacks(logs) == []
    assert boefje_pairs(world.store) == [("dns-records", f"Hostname|internet|h{n}.example") for n in range(10)]
    assert world.octopoes.calls[OBJECTS_CALL] >= 4
    with world.store.session() as session:
        assert backfills(session) == []
