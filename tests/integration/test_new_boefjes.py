"""New boefjes, over real HTTP against the KATalogus and Octopoes stand-ins, on both backends: a boefje
enabled for an organisation gets a task for each existing object it may scan, exactly those, read from
Octopoes a page at a time; a restart resumes the pages, and does not take every enabled boefje for new."""

from __future__ import annotations

import math

from baton.core.priorities import AUTOMATIC_PRIORITY
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.storage.scheduling.backfills import backfills
from baton.storage.tables import Scheduler as SchedulerRow
from tests import queue_api as queue
from tests.katalogus_world import OBJECTS_CALL, World, boefje_pairs, give_up, queued, run_until_idle, world

__all__ = ["world"]  # the fixture

PAGE = 4


def estate(world: World) -> set[tuple[str, str]]:
    """acme's objects, and the (boefje, object) pairs `ports` (hostnames and IPv4 addresses, level 2) may
    scan: those at level 2 or more of the two types, not the others, nor beta's."""
    expected = set()
    for n in range(23):
        level = n % 5
        world.octopoes.add_object("acme", f"Hostname|internet|h{n:02}.example", level=level)
        if level >= 2:
            expected.add(("ports", f"Hostname|internet|h{n:02}.example"))
    for n in range(6):
        world.octopoes.add_object("acme", f"IPAddressV4|internet|10.0.0.{n}", level=2 + n % 3)
        expected.add(("ports", f"IPAddressV4|internet|10.0.0.{n}"))
    for n in range(5):
        world.octopoes.add_object("acme", f"Network|internet|n{n}", level=4)  # a type ports does not consume
        world.octopoes.add_object("beta", f"Hostname|internet|b{n}.example", level=4)  # another organisation
    world.katalogus.add_boefje("ports", ["Hostname", "IPAddressV4"], scan_level=2, oci_image="ghcr.io/x/ports:3")
    return expected


def boefje_scheduler(world: World) -> BoefjeScheduler:
    scheduler = world.boefjes()
    scheduler.backfiller.page_size = PAGE
    return scheduler


def test_enabling_a_boefje_creates_exactly_the_tasks_for_the_objects_it_may_scan(world: World) -> None:
    expected = estate(world)
    scheduler = boefje_scheduler(world)
    run_until_idle(scheduler)  # the first listing: nothing enabled yet
    assert queued(world.store, "boefje-acme") == []
    world.katalogus.set_enabled("acme", "ports", True)
    world.poll_passes()
    run_until_idle(scheduler)
    assert boefje_pairs(world.store) == sorted(expected)
    assert all(task.priority == AUTOMATIC_PRIORITY for task in queued(world.store, "boefje-acme"))
    assert queued(world.store, "boefje-beta") == []
    # Octopoes filters by type and level: one call per page of what the boefje may scan, no more.
    assert world.octopoes.calls[OBJECTS_CALL] == math.ceil(len(expected) / PAGE)
    with world.store.session() as session:
        assert backfills(session) == []


def test_objects_are_read_a_page_at_a_time_and_a_restart_resumes_the_pages(world: World) -> None:
    expected = estate(world)
    world.katalogus.set_enabled("acme", "ports", True)
    first = boefje_scheduler(world)
    first.tick()  # the listing (ports is new), and the first page
    first.tick()  # the second page
    made = len(queued(world.store, "boefje-acme"))
    assert made == 2 * PAGE and world.octopoes.calls[OBJECTS_CALL] == 2
    with world.store.session() as session:
        [cursor] = backfills(session, "acme")
        assert cursor.boefje_id == "ports" and cursor.next_offset == 2 * PAGE
    give_up(first)
    restarted = boefje_scheduler(world)  # a new instance: what a restart or a hand-over runs
    run_until_idle(restarted)
    assert boefje_pairs(world.store) == sorted(expected)
    assert world.octopoes.calls[OBJECTS_CALL] == math.ceil(len(expected) / PAGE), "a page read twice, or skipped"


def test_a_restart_does_not_take_every_enabled_boefje_for_new(world: World) -> None:
    estate(world)
    world.katalogus.set_enabled("acme", "ports", True)
    first = boefje_scheduler(world)
    run_until_idle(first)
    calls = world.octopoes.calls[OBJECTS_CALL]
    give_up(first)
    world.poll_passes()
    restarted = boefje_scheduler(world)
    run_until_idle(restarted)
    assert world.katalogus.calls["GET /v1/organisations/{organisation_id}/plugins"] == 2
    assert world.octopoes.calls[OBJECTS_CALL] == calls  # nothing new: no listing of objects


def test_a_boefje_disabled_while_its_objects_are_read_stops_there(world: World) -> None:
    estate(world)
    world.katalogus.set_enabled("acme", "ports", True)
    scheduler = boefje_scheduler(world)
    scheduler.tick()
    world.katalogus.set_enabled("acme", "ports", False)
    world.poll_passes()
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == PAGE
    with world.store.session() as session:
        assert backfills(session) == []


def test_a_full_queue_shrinks_the_page_until_the_objects_fit(world: World) -> None:
    expected = estate(world)
    world.katalogus.set_enabled("acme", "ports", True)
    with world.store.session() as session:  # room for 3 tasks: a page of 4 never fits
        row = session.get(SchedulerRow, "boefje-acme")
        assert row is not None
        row.maxsize = 3
    scheduler = boefje_scheduler(world)
    popped: list[str] = []
    for _ in range(400):
        scheduler.tick()
        with world.store.session() as session:
            popped += [task.data["input_ooi"] for task in queue.pop(session, scheduler_id="boefje-acme", limit=1)]
        with world.store.session() as session:
            unfinished = backfills(session)
        if not unfinished and not queued(world.store, "boefje-acme"):
            break
    assert sorted(("ports", key) for key in popped) == sorted(expected)
