"""Twins, over real HTTP against the KATalogus and Octopoes stand-ins, on both backends: a boefje task made
for one organisation is made for exactly the organisations KATalogus reports with the same settings of
the boefje (`GET /v1/configs ... with_duplicates=true`) that hold the object at a level the boefje may
scan (`GET /object-clients`), all with the original's id as `deduplication_key`; the group then pops
together. A failing KATalogus or Octopoes leaves the original task made, and is logged once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from baton.core.model import SchedulerSpec, SchedulerType
from baton.core.settings import Settings
from baton.ingest.events import DatabaseInbox
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.runtime import build_app
from baton.storage.control.organisations import create_organisation
from harness.waiting import wait_until
from tests.katalogus_world import World, give_up, octopoes_mutation, queued, run_until_idle, world

__all__ = ["world"]  # the fixture

CONFIGS_CALL = "GET /v1/configs"
CLIENTS_CALL = "GET /object-clients"
SHARED = "Hostname|internet|shared.example"
SETTINGS = {"API_KEY": "same"}


def estate(world: World) -> None:
    """dns-records (scan level 2) enabled everywhere. Same settings as acme's: beta (holds the object at
    level 3: a twin), gamma (does not hold it), epsilon (holds it at level 1, below the boefje's), zeta
    (holds it, but does not deduplicate in KATalogus). delta holds it, with other settings."""
    world.katalogus.add_boefje("dns-records", ["Hostname"], scan_level=2, oci_image="ghcr.io/x/dns:1")
    with world.store.session() as session:
        for org in ("gamma", "delta", "epsilon", "zeta"):
            create_organisation(session, org, org.title(), maxsize=1000)
    for org in ("gamma", "delta", "epsilon", "zeta"):
        world.katalogus.add_organisation(org, deduplicate=org != "zeta")
        world.octopoes.add_organisation(org)
    for org in ("acme", "beta", "gamma", "delta", "epsilon", "zeta"):
        world.katalogus.set_enabled(org, "dns-records", True)
        world.katalogus.set_settings(org, "dns-records", {"API_KEY": "other"} if org == "delta" else SETTINGS)
    for org, level in (("acme", 2), ("beta", 3), ("delta", 4), ("epsilon", 1), ("zeta", 4)):
        world.octopoes.add_object(org, SHARED, level=level)
    world.octopoes.add_object("gamma", "Hostname|internet|gamma-only.example", level=4)


def test_twins_are_made_for_exactly_the_organisations_that_share_settings_and_hold_the_object(world: World) -> None:
    estate(world)
    scheduler = world.boefjes()
    world.put("boefje-acme", octopoes_mutation("acme", SHARED, 2))
    run_until_idle(scheduler)

    [original] = queued(world.store, "boefje-acme")
    assert original.data["deduplication_key"] == str(original.id)  # mula: the original's key is its own id
    [twin] = queued(world.store, "boefje-beta")
    assert twin.data["deduplication_key"] == str(original.id)
    assert twin.data["organization"] == "beta" and twin.organisation == "beta"
    assert twin.data["input_ooi"] == SHARED and twin.data["id"] == str(twin.id)
    assert twin.data["boefje"] == original.data["boefje"]  # the image and version KATalogus gave acme's
    assert twin.priority == original.priority
    for org in ("gamma", "delta", "epsilon", "zeta"):
        assert queued(world.store, f"boefje-{org}") == [], org
    assert world.katalogus.calls[CONFIGS_CALL] == 1
    assert world.octopoes.calls[CLIENTS_CALL] == 1

    # The group pops together (OpenKAT's dialect, any organisation).
    app = build_app(Settings(database_url=world.store.url), world.store)
    with TestClient(app) as client:
        results = client.post("/schedulers/boefje/pop", params={"limit": 5}).json()["results"]
    assert sorted(task["id"] for task in results) == sorted([str(original.id), str(twin.id)])


def test_settings_are_read_once_per_poll_and_objects_nobody_else_holds_cost_one_call(world: World) -> None:
    estate(world)
    scheduler = world.boefjes()
    run_until_idle(scheduler)  # the catalogue; the new boefje's backfill makes acme's task of SHARED, and its twin
    assert len(queued(world.store, "boefje-acme")) == len(queued(world.store, "boefje-beta")) == 1
    assert (world.katalogus.calls[CONFIGS_CALL], world.octopoes.calls[CLIENTS_CALL]) == (1, 1)
    world.put("boefje-acme", *(octopoes_mutation("acme", f"Hostname|internet|h{n}.example", 2) for n in range(3)))
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == 4
    assert len(queued(world.store, "boefje-beta")) == 1  # nobody else holds those objects
    assert world.katalogus.calls[CONFIGS_CALL] == 1  # once for the boefje this poll, not per task
    assert world.octopoes.calls[CLIENTS_CALL] == 4  # once per object
    world.poll_passes()
    world.octopoes.add_object("acme", "Hostname|internet|second.example", level=2)
    world.octopoes.add_object("beta", "Hostname|internet|second.example", level=2)
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|second.example", 2))
    run_until_idle(scheduler)
    assert world.katalogus.calls[CONFIGS_CALL] == 2  # read again, a poll later
    assert len(queued(world.store, "boefje-beta")) == 2


def test_twins_awaiting_their_check_survive_a_restart(world: World) -> None:
    """The scheduler is dropped (as a SIGKILL would leave it) after the transaction that made the task
    committed and before its twin step: the scheduler that takes over makes the twins."""
    estate(world)
    first = world.boefjes()
    world.katalogus.set_enabled("acme", "dns-records", False)
    run_until_idle(first)  # the catalogue (dns-records not enabled: no backfill to make tasks of its own)
    world.katalogus.set_enabled("acme", "dns-records", True)
    world.poll_passes()
    first.catalogue_sync.run(world.clock.now)  # enabled now: the listing written, its backfill not run
    world.put("boefje-acme", octopoes_mutation("acme", SHARED, 2))
    assert first.handle_events(world.clock.now) == 1  # committed: the original task, no twin yet
    [original] = queued(world.store, "boefje-acme")
    assert queued(world.store, "boefje-beta") == []
    give_up(first)  # dropped without stopping: nothing of its memory survives

    restarted = world.boefjes()
    run_until_idle(restarted)
    [twin] = queued(world.store, "boefje-beta")
    assert twin.data["deduplication_key"] == str(original.id) and twin.data["input_ooi"] == SHARED
    [original] = queued(world.store, "boefje-acme")
    assert original.data["deduplication_key"] == str(original.id)


def announced_boefjes(world: World) -> BoefjeScheduler:
    """acme's boefje scheduler reading its inbox in the database, as a process's does: its process's looks
    announce its events, so it takes a first turn only for work they do not announce."""
    context = world.context()
    context.source_factory = lambda spec: DatabaseInbox(spec.id)
    scheduler = BoefjeScheduler(SchedulerSpec("acme", SchedulerType.BOEFJE), context)
    scheduler.setup()
    return scheduler


def test_a_scheduler_starting_with_left_over_twin_checks_or_backfills_takes_a_first_turn(world: World) -> None:
    """Work a killed owner left in the database (a check, a backfill) is announced by no look of the
    process (events and due schedules are): the next scheduler finds it and takes a first turn."""
    estate(world)
    first = world.boefjes()
    world.katalogus.set_enabled("acme", "dns-records", False)
    run_until_idle(first)
    assert announced_boefjes(world).first_tick_delay() > 3600  # nothing left: woken when input comes
    world.katalogus.set_enabled("acme", "dns-records", True)
    world.poll_passes()
    first.catalogue_sync.run(world.clock.now)  # enabled now: its backfill started, not run
    poll = world.context().settings.timing.poll_interval_seconds
    assert announced_boefjes(world).first_tick_delay() <= poll
    first.backfiller.pending = True  # as the tick that ran the sync sets it
    while first.backfiller.step(world.clock.now):  # acme's task of SHARED made and noted for its twin check
        pass
    assert len(queued(world.store, "boefje-acme")) == 1 and queued(world.store, "boefje-beta") == []
    assert announced_boefjes(world).first_tick_delay() <= poll
    give_up(first)
    run_until_idle(world.boefjes())  # the twin made
    assert len(queued(world.store, "boefje-beta")) == 1
    assert announced_boefjes(world).first_tick_delay() > 3600


def test_octopoes_is_asked_about_several_objects_at_a_time(world: World) -> None:
    """Octopoes answers one object per `GET /object-clients`: a turn's twin checks ask it about several
    objects at once, not one after another (a rescan round of a boefje every organisation shares
    waited out a round trip per task), and each check's answer still makes its own twins."""
    estate(world)
    shared = [f"Hostname|internet|shared-{n}.example" for n in range(3)]
    for reference in shared:
        world.octopoes.add_object("acme", reference, level=2)
        world.octopoes.add_object("beta", reference, level=3)
    scheduler = world.boefjes()
    world.katalogus.set_enabled("acme", "dns-records", False)
    run_until_idle(scheduler)  # the catalogue, without a backfill of acme's objects
    world.katalogus.set_enabled("acme", "dns-records", True)
    world.poll_passes()
    scheduler.catalogue_sync.run(world.clock.now)
    world.put("boefje-acme", *(octopoes_mutation("acme", reference, 2) for reference in shared))
    assert scheduler.handle_events(world.clock.now) == 3  # three tasks, their twin checks noted
    assert scheduler.twins is not None
    world.octopoes.holds.hold(CLIENTS_CALL)
    step = threading.Thread(target=scheduler.twins.step, args=(world.clock.now,))
    step.start()
    try:
        assert wait_until(lambda: world.octopoes.holds.waiting(CLIENTS_CALL) == 3, 30), "asked one at a time"
    finally:
        world.octopoes.holds.release()
        step.join(30)
    twins = queued(world.store, "boefje-beta")
    assert sorted(twin.data["input_ooi"] for twin in twins) == shared
    originals = {str(task.id): task.data["input_ooi"] for task in queued(world.store, "boefje-acme")}
    assert {originals[twin.data["deduplication_key"]] for twin in twins} == set(shared)  # each its own original


def test_a_twin_that_ran_within_the_grace_period_is_not_made_again(world: World) -> None:
    estate(world)
    acme, beta = world.boefjes("acme"), world.boefjes("beta")
    world.put("boefje-beta", octopoes_mutation("beta", SHARED, 3))
    run_until_idle(beta)  # beta made its own task (and acme's twin)
    assert len(queued(world.store, "boefje-beta")) == 1
    assert len(queued(world.store, "boefje-acme")) == 1
    world.put("boefje-acme", octopoes_mutation("acme", SHARED, 2))
    run_until_idle(acme)  # within the grace period: no second task for acme, nor a twin for beta
    assert len(queued(world.store, "boefje-acme")) == 1
    assert len(queued(world.store, "boefje-beta")) == 1


def answer_500(world: World, service: str) -> Callable[[], None]:
    standin = getattr(world, service)
    standin.faults.status = 500
    return standin.faults.clear


def failing_lines(logs: list[dict[str, Any]], service: str) -> list[str]:
    return [line["event"] for line in logs if line.get("service") == service and line["log_level"] == "warning"]


@pytest.mark.parametrize("service", ["katalogus", "octopoes"])
def test_a_failing_service_leaves_the_original_task_and_is_logged_once(world: World, service: str) -> None:
    estate(world)
    scheduler = world.boefjes()
    run_until_idle(scheduler)  # the catalogue, read before the outage
    if service == "katalogus":
        world.poll_passes()  # the boefje's settings, read with the backfill's twin, are due again
        run_until_idle(scheduler)  # (and the catalogue with them, before the outage)
    assert [task.data["input_ooi"] for task in queued(world.store, "boefje-beta")] == [SHARED]
    before = 1
    with capture_logs() as logs:
        restore = answer_500(world, service)
        for n in range(3):  # objects beta holds too: twins, were the services answering
            world.octopoes.add_object("beta", f"Hostname|internet|n{n}", level=4)
            world.put("boefje-acme", octopoes_mutation("acme", f"Hostname|internet|n{n}", 2))
            run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == 4  # every original made (and the backfill's)
    assert len(queued(world.store, "boefje-beta")) == before
    assert failing_lines(logs, service) == ["outside service failing"]
    assert not [line for line in logs if line["log_level"] in ("error", "critical") or line.get("exc_info")]
    restore()
    world.poll_passes()  # the next try of the service
    world.put("boefje-acme", octopoes_mutation("acme", "Hostname|internet|later", 2))
    world.octopoes.add_object("beta", "Hostname|internet|later", level=4)
    world.octopoes.add_object("acme", "Hostname|internet|later", level=2)
    run_until_idle(scheduler)
    made = sorted(task.data["input_ooi"] for task in queued(world.store, "boefje-beta"))
    assert made == sorted([SHARED, "Hostname|internet|later"])  # the backfill's twin, and the new one


def test_without_deduplication_no_twin_is_made(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_DEDUPLICATE", "false")
    estate(world)
    scheduler = world.boefjes()
    world.put("boefje-acme", octopoes_mutation("acme", SHARED, 2))
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == 1
    assert queued(world.store, "boefje-beta") == []
    assert world.katalogus.calls[CONFIGS_CALL] == 0 and world.octopoes.calls[CLIENTS_CALL] == 0
