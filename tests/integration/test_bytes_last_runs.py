"""The grace period asks Bytes, over real HTTP against the KATalogus, Octopoes and Bytes stand-ins, on both
backends: a (boefje, object) that Baton does not remember running but that Bytes says ran within the grace
period (mula's runs, runs started from OpenKAT's boefjes API) is not queued again, whether an event, a new
boefje's backfill or a rescan asks; Bytes is asked once per object for a few objects and once per boefje
(a listing of its runs since the grace horizon) for many; what it said is remembered in `boefje_runs`; a
Bytes outage delays the task (the event waits, the schedule stays due) and is logged once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from structlog.testing import capture_logs

from baton.core.model import TaskStatus
from baton.core.settings import OpenKatSettings
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.openkat import BytesClient
from baton.storage.scheduling.schedules import ScheduleQuery, list_schedules
from baton.storage.scheduling.service_states import outside_services
from baton.storage.tables import BoefjeRun, Schedule
from harness.standins import BytesStandin, StandinServer
from tests import queue_api as queue
from tests.katalogus_world import World, client, octopoes_mutation, queued, run_until_idle, world

__all__ = ["world"]  # the fixture

USER, PASSWORD = "bytes-user", "bytes-secret"
GRACE = 3600.0  # the world's grace period
INTERVAL = 60.0
HOST = "Hostname|internet|a.example"


@pytest.fixture
def bytes_runs(world: World) -> Iterator[tuple[BytesStandin, StandinServer]]:
    standin = BytesStandin(USER, PASSWORD)
    with StandinServer(standin.app) as server:
        world.link.bytes = BytesClient(client("bytes", server.url), USER, PASSWORD)
        yield standin, server
        world.link.bytes.http.close()


def boefjes(world: World, **openkat: Any) -> BoefjeScheduler:
    settings = {"rescan_interval_seconds": INTERVAL, "rescan_jitter_seconds": 0.0, **openkat}
    scheduler: BoefjeScheduler = world.scheduler(BoefjeScheduler, openkat=OpenKatSettings(**settings))
    return scheduler


def dns_enabled(world: World) -> BoefjeScheduler:
    """dns-records enabled for acme, its (empty) catalogue and backfill done."""
    world.katalogus.add_boefje("dns-records", ["Hostname"], scan_level=1, oci_image="dns:1")
    world.katalogus.set_enabled("acme", "dns-records", True)
    scheduler = boefjes(world)
    run_until_idle(scheduler)
    return scheduler


def ran(standin: BytesStandin, world: World, reference: str, ended_ago: float) -> None:
    ended = world.clock.now - timedelta(seconds=ended_ago)
    standin.add_run("acme", "dns-records", reference, started_at=ended - timedelta(minutes=5), ended_at=ended)


def scan(world: World, *references: str, level: int = 2) -> None:
    for reference in references:
        world.octopoes.add_object("acme", reference, level=level)
        world.put("boefje-acme", octopoes_mutation("acme", reference, level))


def queued_objects(world: World) -> list[str]:
    return sorted(task.data["input_ooi"] for task in queued(world.store, "boefje-acme"))


def remembered(world: World, reference: str) -> Any:
    with world.store.session() as session:
        return session.scalar(select(BoefjeRun.queued_at).where(BoefjeRun.object_key == reference))


def bytes_lines(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(line["log_level"], line["event"]) for line in logs if line.get("service") == "bytes"]


def bytes_down(world: World) -> bool:
    with world.store.session() as session:
        return any(row.down for row in outside_services(session) if row.service == "bytes")


def test_a_run_bytes_knows_within_the_grace_period_counts_as_a_run(
    world: World, bytes_runs: tuple[BytesStandin, StandinServer]
) -> None:
    standin, _ = bytes_runs
    scheduler = dns_enabled(world)
    ran(standin, world, HOST, ended_ago=600)  # by mula, say: Baton never queued it
    ran(standin, world, "Hostname|internet|old.example", ended_ago=2 * GRACE)
    scan(world, HOST, "Hostname|internet|old.example", "Hostname|internet|new.example")
    run_until_idle(scheduler)
    assert queued_objects(world) == ["Hostname|internet|new.example", "Hostname|internet|old.example"]
    assert remembered(world, HOST) == world.clock.now - timedelta(seconds=600)
    asked = [(query["boefje_id"], query["input_ooi"], query["limit"]) for query in standin.asked]
    assert sorted(asked) == [
        ("dns-records", reference, 1)
        for reference in sorted([HOST, "Hostname|internet|new.example", "Hostname|internet|old.example"])
    ]  # a few objects: mula's question, one per object

    scan(world, HOST)  # again: Baton remembers what Bytes said, and asks no more
    run_until_idle(scheduler)
    assert len(standin.asked) == 3 and HOST not in queued_objects(world)


def test_many_objects_of_a_boefje_cost_one_listing_of_its_runs(
    world: World, bytes_runs: tuple[BytesStandin, StandinServer]
) -> None:
    standin, _ = bytes_runs
    scheduler = dns_enabled(world)
    references = [f"Hostname|internet|h{n:02}.example" for n in range(30)]
    for reference in references[:3]:
        ran(standin, world, reference, ended_ago=300)
    standin.add_run("acme", "dns-records", None, started_at=world.clock.now)  # no object: never in the way
    standin.add_run("beta", "dns-records", references[3], started_at=world.clock.now)  # another organisation
    scan(world, *references)
    run_until_idle(scheduler)
    assert queued_objects(world) == references[3:]
    assert [(query["boefje_id"], query["input_ooi"]) for query in standin.asked] == [("dns-records", "*")]


def test_a_new_boefjes_objects_ask_bytes_too(world: World, bytes_runs: tuple[BytesStandin, StandinServer]) -> None:
    standin, _ = bytes_runs
    references = [f"Hostname|internet|h{n:02}.example" for n in range(12)]
    for reference in references:
        world.octopoes.add_object("acme", reference, level=2)
    ran(standin, world, references[0], ended_ago=60)
    world.katalogus.add_boefje("dns-records", ["Hostname"], scan_level=1, oci_image="dns:1")
    world.katalogus.set_enabled("acme", "dns-records", True)
    run_until_idle(boefjes(world))
    assert queued_objects(world) == references[1:]


def test_a_bytes_outage_makes_events_wait_and_is_logged_once(
    world: World, bytes_runs: tuple[BytesStandin, StandinServer]
) -> None:
    standin, _ = bytes_runs
    scheduler = dns_enabled(world)
    with capture_logs() as logs:
        standin.faults.status = 500
        scan(world, HOST)
        for _ in range(3):  # three polls into the outage: the event waits
            run_until_idle(scheduler)
            world.poll_passes()
        assert queued_objects(world) == [] and world.waiting("boefje-acme") == 1
        assert bytes_down(world)
        standin.faults.clear()
        world.poll_passes()
        run_until_idle(scheduler)
    assert queued_objects(world) == [HOST] and world.waiting("boefje-acme") == 0
    assert not bytes_down(world)
    assert bytes_lines(logs) == [("warning", "outside service failing"), ("info", "outside service answering again")]
    assert not [line for line in logs if line["log_level"] in ("error", "critical") or line.get("exc_info")]


def test_a_bytes_outage_leaves_a_due_schedule_due_and_a_run_it_knows_moves_the_deadline(
    world: World, bytes_runs: tuple[BytesStandin, StandinServer]
) -> None:
    standin, _ = bytes_runs
    scheduler = dns_enabled(world)
    scan(world, HOST)
    run_until_idle(scheduler)
    finish_all(world)
    [schedule] = schedules(world)
    deadline = schedule.deadline_at
    world.clock.advance(GRACE)
    standin.faults.status = 500
    run_until_idle(scheduler)
    [schedule] = schedules(world)
    assert (schedule.enabled, schedule.deadline_at) == (True, deadline)  # due still: the next round tries
    assert queued(world.store, "boefje-acme") == []

    standin.faults.clear()
    ran(standin, world, HOST, ended_ago=120)  # run meanwhile outside Baton
    world.clock.advance(INTERVAL)
    run_until_idle(scheduler)
    [schedule] = schedules(world)
    assert queued(world.store, "boefje-acme") == []
    assert schedule.deadline_at == world.clock.now - timedelta(seconds=120 + INTERVAL) + timedelta(seconds=GRACE)


def finish_all(world: World) -> None:
    """The runners pop every queued task and complete it."""
    with world.store.session() as session:
        popped = queue.pop(session, scheduler_id="boefje-acme", limit=1000)
    with world.store.session() as session:
        for task in popped:
            queue.change_status(session, task.id, TaskStatus.RUNNING)
            queue.change_status(session, task.id, TaskStatus.COMPLETED)


def schedules(world: World) -> list[Schedule]:
    with world.store.session() as session:
        return list(list_schedules(session, ScheduleQuery(organisation="acme"), limit=100)[1])
