"""Periodic rescans, over real HTTP against the KATalogus and Octopoes stand-ins, on both backends: every
boefje task gets a schedule, a due schedule is scanned again after the grace period, a vanished object or
a disabled plugin disables it with its reason and it comes back when the reason goes away; a cancelled task
blocks nothing; all due schedules of a round are handled, oldest first, with one Octopoes call per 500.
Time runs on the test's clock (short settings, no sleeps)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from baton.core.jobs import murmur_hex
from baton.core.model import SchedulerSpec, SchedulerType, TaskStatus
from baton.core.rescans import OBJECT_GONE, PLUGIN_NOT_ENABLED, SCAN_LEVEL_TOO_LOW
from baton.core.settings import OpenKatSettings, Settings
from baton.ingest.events import InProcessSource
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.engine import Store
from baton.storage.scheduling.plugins import seed_plugins
from baton.storage.scheduling.schedules import ScheduleQuery, create_schedule, list_schedules
from baton.storage.tables import BoefjeRun, Schedule, Task
from tests import queue_api as queue
from tests.katalogus_world import Clock, World, octopoes_mutation, queued, run_until_idle, world

__all__ = ["world"]  # the fixture

GRACE = 3600.0  # the world's grace period
INTERVAL = 60.0
LOAD_BULK = "POST /{client}/objects/load_bulk"
HOST = "Hostname|internet|a.example"


def rescans(world: World, **openkat: Any) -> BoefjeScheduler:
    settings = {"rescan_interval_seconds": INTERVAL, "rescan_jitter_seconds": 0.0, **openkat}
    scheduler: BoefjeScheduler = world.scheduler(BoefjeScheduler, openkat=OpenKatSettings(**settings))
    return scheduler


def schedules(store: Store, org: str = "acme") -> list[Schedule]:
    with store.session() as session:
        return list(list_schedules(session, ScheduleQuery(organisation=org), limit=100_000)[1])


def finish_all(store: Store, queue_id: str = "boefje-acme", status: TaskStatus = TaskStatus.COMPLETED) -> int:
    """The runners pop every queued task and end it with `status`."""
    with store.session() as session:
        popped = queue.pop(session, scheduler_id=queue_id, limit=100_000)
    with store.session() as session:
        for task in popped:
            if status is not TaskStatus.CANCELLED:
                queue.change_status(session, task.id, TaskStatus.RUNNING)
            queue.change_status(session, task.id, status)
    return len(popped)


def enabled_dns(world: World, scan_level: int = 1, **fields: Any) -> None:
    world.katalogus.add_boefje("dns-records", ["Hostname"], scan_level=scan_level, oci_image="dns:1", **fields)
    world.katalogus.set_enabled("acme", "dns-records", True)


def first_scan(world: World, scheduler: BoefjeScheduler, reference: str = HOST, level: int = 2) -> None:
    world.octopoes.add_object("acme", reference, level=level)
    world.put("boefje-acme", octopoes_mutation("acme", reference, level))
    run_until_idle(scheduler)


def test_every_task_gets_a_schedule_and_its_object_is_scanned_again_after_the_grace_period(world: World) -> None:
    enabled_dns(world)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    [task] = queued(world.store, "boefje-acme")
    [schedule] = schedules(world.store)
    assert schedule.scheduler_id == "boefje" and schedule.enabled and schedule.hash == task.hash
    assert task.schedule_id == str(schedule.id)
    assert schedule.data["boefje"]["id"] == "dns-records" and schedule.data["input_ooi"] == HOST
    assert schedule.deadline_at == world.clock.now + timedelta(seconds=GRACE)
    assert schedule.last_run_at == world.clock.now
    assert finish_all(world.store) == 1

    world.clock.advance(GRACE - 1)  # not yet due: nothing
    run_until_idle(scheduler)
    assert queued(world.store, "boefje-acme") == [] and world.octopoes.calls[LOAD_BULK] == 0

    world.clock.advance(INTERVAL)  # the next round comes within a rescan interval of the deadline
    run_until_idle(scheduler)
    [again] = queued(world.store, "boefje-acme")
    assert (again.data["input_ooi"], again.schedule_id) == (HOST, str(schedule.id))
    assert again.data["boefje"]["oci_image"] == "dns:1"
    [schedule] = schedules(world.store)
    assert schedule.last_run_at == world.clock.now and schedule.deadline_at is not None
    assert (schedule.deadline_at - world.clock.now).total_seconds() == GRACE
    assert world.octopoes.calls[LOAD_BULK] == 1


def test_a_twin_already_queued_is_not_an_error_and_the_schedule_moves_on(world: World) -> None:
    enabled_dns(world)
    scheduler = rescans(world)
    first_scan(world, scheduler)  # its task stays queued: nobody pops it
    world.clock.advance(GRACE)
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == 1  # the queued twin, not a second task
    [schedule] = schedules(world.store)
    assert schedule.last_run_at == world.clock.now and schedule.enabled


def test_a_cancelled_task_does_not_block_rescans(world: World) -> None:
    enabled_dns(world)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    finish_all(world.store, status=TaskStatus.CANCELLED)
    world.clock.advance(GRACE)
    run_until_idle(scheduler)
    assert [task.data["input_ooi"] for task in queued(world.store, "boefje-acme")] == [HOST]


def test_a_vanished_object_disables_its_schedule_until_it_comes_back_at_a_sufficient_level(world: World) -> None:
    enabled_dns(world, scan_level=2)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    finish_all(world.store)
    world.octopoes.remove_object("acme", HOST)
    world.clock.advance(GRACE)
    run_until_idle(scheduler)
    [schedule] = schedules(world.store)
    assert (schedule.enabled, schedule.disabled_reason) == (False, OBJECT_GONE)
    assert queued(world.store, "boefje-acme") == []

    world.clock.advance(GRACE)  # disabled: later rounds leave it alone (no call for it)
    calls = world.octopoes.calls[LOAD_BULK]
    run_until_idle(scheduler)
    assert world.octopoes.calls[LOAD_BULK] == calls

    world.octopoes.add_object("acme", HOST, level=1)  # back, but too low: still no task
    world.put("boefje-acme", octopoes_mutation("acme", HOST, 1))
    run_until_idle(scheduler)
    assert not schedules(world.store)[0].enabled

    world.octopoes.set_level("acme", HOST, 2)  # at a sufficient level: enabled again, with a task
    world.put("boefje-acme", octopoes_mutation("acme", HOST, 2, "update"))
    run_until_idle(scheduler)
    [schedule] = schedules(world.store)
    assert (schedule.enabled, schedule.disabled_reason, schedule.disabled_detail) == (True, None, None)
    assert [task.data["input_ooi"] for task in queued(world.store, "boefje-acme")] == [HOST]


def test_a_scan_level_lowered_disables_with_its_reason(world: World) -> None:
    enabled_dns(world, scan_level=2)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    finish_all(world.store)
    world.octopoes.set_level("acme", HOST, 1)
    world.clock.advance(GRACE)
    run_until_idle(scheduler)
    [schedule] = schedules(world.store)
    assert (schedule.enabled, schedule.disabled_reason) == (False, SCAN_LEVEL_TOO_LOW)
    assert schedule.disabled_detail is not None and "level 1" in schedule.disabled_detail


def test_a_plugin_disabled_disables_its_schedules_and_enabling_it_brings_them_back(world: World) -> None:
    enabled_dns(world)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    finish_all(world.store)
    world.katalogus.set_enabled("acme", "dns-records", False)
    world.clock.advance(GRACE)
    run_until_idle(scheduler)
    [schedule] = schedules(world.store)
    assert (schedule.enabled, schedule.disabled_reason) == (False, PLUGIN_NOT_ENABLED)
    assert world.octopoes.calls[LOAD_BULK] == 0  # the catalogue alone decided: no call

    world.katalogus.set_enabled("acme", "dns-records", True)
    world.clock.advance(INTERVAL)  # the next poll and the next round
    run_until_idle(scheduler)
    [schedule] = schedules(world.store)
    assert schedule.enabled and schedule.disabled_reason is None
    assert [task.data["input_ooi"] for task in queued(world.store, "boefje-acme")] == [HOST]


def test_an_octopoes_outage_disables_nothing_and_the_round_catches_up(world: World) -> None:
    enabled_dns(world)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    finish_all(world.store)
    world.octopoes.faults.status = 500
    world.clock.advance(GRACE)
    run_until_idle(scheduler)
    [schedule] = schedules(world.store)
    assert schedule.enabled and schedule.disabled_reason is None and queued(world.store, "boefje-acme") == []
    world.octopoes.faults.clear()
    world.clock.advance(INTERVAL)
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == 1


def test_a_round_handles_all_due_schedules_oldest_first_with_one_octopoes_call_per_500(world: World) -> None:
    enabled_dns(world)
    scheduler = rescans(world)
    scheduler.rescans.page_size = 600
    groups, per_group = 7, 100
    for group in range(groups):  # each group one second after the previous: its deadlines one second later
        for n in range(per_group):
            reference = f"Hostname|internet|g{group}-{n:03}.example"
            world.octopoes.add_object("acme", reference, level=2)
            world.put("boefje-acme", octopoes_mutation("acme", reference, 2))
        run_until_idle(scheduler)
        world.clock.advance(1)
    assert len(schedules(world.store)) == groups * per_group
    finish_all(world.store)
    world.clock.advance(GRACE)
    scheduler.tick()  # one page: the 600 oldest deadlines, two Octopoes calls
    first = {task.data["input_ooi"] for task in queued(world.store, "boefje-acme")}
    assert {reference.split("|")[2].split("-")[0] for reference in first} == {f"g{group}" for group in range(6)}
    assert len(first) == 600 and world.octopoes.calls[LOAD_BULK] == 2
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == groups * per_group
    assert world.octopoes.calls[LOAD_BULK] == 3
    assert all(schedule.last_run_at == world.clock.now for schedule in schedules(world.store))


def test_a_plugin_interval_sets_the_next_deadline(world: World) -> None:
    enabled_dns(world, interval=30)
    scheduler = rescans(world)
    first_scan(world, scheduler)
    [schedule] = schedules(world.store)
    assert (schedule.deadline_at - world.clock.now).total_seconds() == 30 * 60
    finish_all(world.store)
    world.clock.advance(30 * 60)
    run_until_idle(scheduler)
    assert len(queued(world.store, "boefje-acme")) == 1


def test_a_boefje_with_run_on_gets_no_schedule(world: World) -> None:
    enabled_dns(world, run_on=["create"])
    scheduler = rescans(world)
    first_scan(world, scheduler)
    assert len(queued(world.store, "boefje-acme")) == 1 and schedules(world.store) == []


def test_a_schedule_without_an_object_is_rescheduled_not_disabled(world: World) -> None:
    """mula: a boefje schedule whose task has no `input_ooi` skips the object checks and queues its task
    again (the same job, without an object), its deadline moved on: not disabled as a vanished object."""
    enabled_dns(world)
    scheduler = rescans(world)
    job = {"boefje": {"id": "dns-records", "name": "DNS records"}, "input_ooi": None, "organization": "acme"}
    digest = murmur_hex("dns-records-acme")
    with world.store.session() as session:
        schedule = create_schedule(
            session,
            scheduler_id="boefje",
            organisation="acme",
            data=job,
            schedule=None,
            deadline_at=world.clock.now - timedelta(minutes=1),
            schedule_hash=digest,
        )
    run_until_idle(scheduler)
    [kept] = schedules(world.store)
    assert (kept.id, kept.enabled, kept.disabled_reason) == (schedule.id, True, None)
    assert kept.last_run_at == world.clock.now
    assert kept.deadline_at == world.clock.now + timedelta(seconds=GRACE)
    [task] = queued(world.store, "boefje-acme")
    assert task.data["input_ooi"] is None and task.data["boefje"]["id"] == "dns-records"
    assert (task.hash, task.schedule_id) == (digest, str(schedule.id))
    assert world.octopoes.calls[LOAD_BULK] == 0  # no object to ask Octopoes about

    finish_all(world.store)
    world.clock.advance(GRACE)  # due again: queued again, as any schedule is
    run_until_idle(scheduler)
    assert [task.data["input_ooi"] for task in queued(world.store, "boefje-acme")] == [None]


def test_the_embedded_catalogue_rescans_after_the_grace_period(store: Store) -> None:
    """No KATalogus, no Octopoes: Baton's own catalogue and the grace period decide."""
    with store.session() as session:
        seed_plugins(
            session, [{"id": "dns", "type": "boefje", "name": "DNS", "consumes": ["Hostname"], "scan_level": 1}]
        )
    with store.session() as session:
        from baton.storage.control.organisations import create_organisation

        create_organisation(session, "acme", "Acme", maxsize=100)
    source, clock = InProcessSource(), Clock()
    openkat = OpenKatSettings(rescan_interval_seconds=INTERVAL, rescan_jitter_seconds=0.0)
    settings = Settings(database_url=store.url, grace_period_seconds=1, openkat=openkat)
    context = SchedulerContext(store, settings, "test", "here", source_factory=lambda _: source, clock=clock)
    scheduler = BoefjeScheduler(SchedulerSpec("acme", SchedulerType.BOEFJE), context)
    scheduler.setup()
    source.put(
        {"type": "scan_profile_mutation", "object": {"primary_key": HOST, "object_type": "Hostname", "scan_level": 2}}
    )
    run_until_idle(scheduler)
    finish_all(store)
    [schedule] = schedules(store)
    assert schedule.enabled
    clock.advance(INTERVAL)  # past the grace period (1 s), and the next round is due
    run_until_idle(scheduler)
    [task] = queued(store, "boefje-acme")
    assert task.schedule_id == str(schedule.id)


def test_a_manual_run_gets_a_schedule(client: TestClient, store: Store) -> None:
    client.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
    run = {
        "scheduler_id": "boefje",
        "organisation": "acme",
        "priority": 1,
        "data": {"boefje": {"id": "dns-records", "name": "DNS"}, "input_ooi": HOST, "organization": "acme"},
    }
    pushed = client.post("/schedulers/boefje/push", json=run)
    assert pushed.status_code == 201, pushed.text
    listed = client.get("/schedules", params={"organisation": "acme"}).json()
    [schedule] = listed["results"]
    assert schedule["hash"] == pushed.json()["hash"] and schedule["enabled"]
    assert schedule["data"]["input_ooi"] == HOST and schedule["disabled_reason"] is None
    task = client.get(f"/tasks/{pushed.json()['id']}").json()
    assert task["schedule_id"] == schedule["id"]
    with store.session() as session:  # the run counts for the grace period, as a planned one does
        assert session.scalar(select(BoefjeRun.queued_at).where(BoefjeRun.object_key == HOST)) is not None
    # rocky runs it again later: the same schedule, refreshed (idempotent)
    with store.session() as session:
        queue.pop(session, scheduler_id="boefje-acme", limit=1)
    again = client.post("/schedulers/boefje/push", json=run)
    assert again.status_code == 201, again.text
    assert client.get("/schedules", params={"organisation": "acme"}).json()["count"] == 1


def test_a_boefje_job_pushed_in_batons_dialect_gets_a_schedule_as_in_openkats(client: TestClient, store: Store) -> None:
    """Both dialects treat a boefje task's schedule alike: Baton's push of an OpenKAT boefje job makes
    (or refreshes) the same schedule, links the task and records the run."""
    client.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
    job = {"boefje": {"id": "dns-records", "name": "DNS"}, "input_ooi": HOST, "organization": "acme"}
    pushed = client.post("/queues/boefje-acme/push", json={"priority": 5, "data": job})
    assert pushed.status_code == 201, pushed.text
    [schedule] = client.get("/schedules", params={"organisation": "acme"}).json()["results"]
    assert schedule["hash"] == pushed.json()["hash"] and schedule["enabled"]
    assert pushed.json()["schedule_id"] == schedule["id"]
    with store.session() as session:
        assert session.scalar(select(BoefjeRun.queued_at).where(BoefjeRun.object_key == HOST)) is not None
    # Anything else pushed to a boefje queue is stored as it is, without a schedule.
    other = client.post("/queues/boefje-acme/push", json={"priority": 5, "data": {"anything": 1}})
    assert other.status_code == 201 and other.json()["schedule_id"] is None
    assert client.get("/schedules", params={"organisation": "acme"}).json()["count"] == 1


def test_a_pushed_boefje_task_and_its_schedule_are_written_together_or_not_at_all(
    client: TestClient, store: Store
) -> None:
    """The task, its schedule and its run are one write: when the schedule cannot be written (here a
    trigger refuses it, as a process dying between two commits would leave it), no task is queued
    without its schedule either."""
    client.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
    run = {
        "scheduler_id": "boefje",
        "organisation": "acme",
        "priority": 1,
        "data": {"boefje": {"id": "dns-records", "name": "DNS"}, "input_ooi": HOST, "organization": "acme"},
    }
    with refusing_schedules(store), pytest.raises(Exception, match="no schedules today"):
        client.post("/schedulers/boefje/push", json=run)
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Task)) == 0
        assert session.scalar(select(func.count()).select_from(BoefjeRun)) == 0


@contextmanager
def refusing_schedules(store: Store) -> Iterator[None]:
    """While inside, a trigger makes every write of a schedule fail."""
    with store.engine.begin() as conn:
        if store.is_postgresql:
            conn.exec_driver_sql(
                "CREATE OR REPLACE FUNCTION refuse_schedule() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'no schedules today'; END $$"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_schedule BEFORE INSERT OR UPDATE ON schedules "
                "FOR EACH ROW EXECUTE FUNCTION refuse_schedule()"
            )
        else:
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_schedule BEFORE INSERT ON schedules "
                "BEGIN SELECT RAISE(ABORT, 'no schedules today'); END"
            )
    try:
        yield
    finally:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                "DROP TRIGGER IF EXISTS refuse_schedule" + (" ON schedules" if store.is_postgresql else "")
            )
