"""Task-creation rules of each scheduler, driven through their real tick() on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from baton.core.jobs import murmur_hex
from baton.core.model import SchedulerSpec, SchedulerType, TaskStatus
from baton.core.priorities import rank_boefje_task
from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import PluginSpec
from baton.ingest.events import InProcessSource, as_uuid
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.ingest.planners.report import ReportScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.scheduling.plugins import seed_plugins, set_enabled_for_organisation
from baton.storage.scheduling.schedules import create_schedule
from baton.storage.tables import Schedule, Task
from tests import queue_api as queue

PLUGINS = [
    PluginSpec(id="dns", type="boefje", name="DNS", consumes=["Hostname"], scan_level=1),
    PluginSpec(id="ports", type="boefje", name="Ports", consumes=["IPAddressV4", "Hostname"], scan_level=3),
    PluginSpec(id="off", type="boefje", name="Off", consumes=["Hostname"], scan_level=0, enabled=False),
    PluginSpec(id="ips", type="boefje", name="IPs", consumes=["IPAddressV4"], scan_level=0),
    PluginSpec(id="norm-dns", type="normalizer", name="DNS n", consumes=["boefje/dns"]),
    PluginSpec(id="norm-html", type="normalizer", name="HTML n", consumes=["text/html", "text/xml"]),
    PluginSpec(id="norm-off", type="normalizer", name="Off n", consumes=["text/html"], enabled=False),
]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def org_store(store: Store) -> Store:
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=5)
        seed_plugins(session, [spec.model_dump() for spec in PLUGINS])
    return store


def make(kind: type[Any], store: Store, clock: Clock, source: InProcessSource | None = None) -> Any:
    settings = Settings(database_url=store.url, grace_period_seconds=3600)
    context = SchedulerContext(
        store=store,
        settings=settings,
        runner="test",
        location="here",
        source_factory=lambda spec: source,
        clock=clock,
    )
    scheduler = kind(SchedulerSpec("acme", kind.type), context)
    scheduler.setup()
    return scheduler


def mutation(
    key: str = "Hostname|internet|example.com", object_type: str = "Hostname", level: int = 2
) -> dict[str, Any]:
    return {
        "type": "scan_profile_mutation",
        "object": {"primary_key": key, "object_type": object_type, "scan_level": level},
    }


def raw_file(raw_id: str, *mime_types: str) -> dict[str, Any]:
    return {"type": "raw_file_received", "raw_file": {"id": raw_id, "mime_types": list(mime_types)}}


def queued(store: Store, queue_id: str) -> list[Task]:
    with store.session() as session:
        return list(queue.list_tasks(session, scheduler_id=queue_id, status=TaskStatus.QUEUED)[1])


def test_boefje_tasks_match_object_type_scan_level_and_enablement(org_store: Store) -> None:
    source, clock = InProcessSource(), Clock()
    scheduler = make(BoefjeScheduler, org_store, clock, source)
    source.put(mutation(level=2))
    source.put(mutation("IPAddressV4|internet|1.2.3.4", "IPAddressV4", 0))
    assert scheduler.tick() == 2
    tasks = queued(org_store, "boefje-acme")
    pairs = sorted((task.data["boefje"]["id"], task.data["input_ooi"]) for task in tasks)
    # dns: level 1 <= 2; ports needs level 3; off is disabled; ips consumes IP addresses at level 0.
    assert pairs == [("dns", "Hostname|internet|example.com"), ("ips", "IPAddressV4|internet|1.2.3.4")]
    assert all(task.priority == 2 for task in tasks)  # never run before: first of the automatic tasks


def test_organisation_override_enables_a_disabled_boefje(org_store: Store) -> None:
    with org_store.session() as session:
        set_enabled_for_organisation(session, "acme", "off", True)
        set_enabled_for_organisation(session, "acme", "dns", False)
    source, clock = InProcessSource(), Clock()
    scheduler = make(BoefjeScheduler, org_store, clock, source)
    source.put(mutation(level=1))
    scheduler.tick()
    assert [task.data["boefje"]["id"] for task in queued(org_store, "boefje-acme")] == ["off"]


def test_grace_period_blocks_requeue_until_it_passes(org_store: Store) -> None:
    source, clock = InProcessSource(), Clock()
    scheduler = make(BoefjeScheduler, org_store, clock, source)
    source.put(mutation())
    scheduler.tick()
    with org_store.session() as session:
        queue.pop(session, scheduler_id="boefje-acme")
    clock.now += timedelta(minutes=59)
    source.put(mutation())
    scheduler.tick()
    assert queued(org_store, "boefje-acme") == []
    clock.now += timedelta(minutes=2)
    source.put(mutation())
    scheduler.tick()
    again = queued(org_store, "boefje-acme")
    assert len(again) == 1
    assert again[0].priority == rank_boefje_task(clock.now - timedelta(minutes=61), clock.now) > 2


def test_ranker_prefers_never_run_then_longest_waiting() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert rank_boefje_task(None, now) == 2
    recent = rank_boefje_task(now - timedelta(hours=1), now)
    old = rank_boefje_task(now - timedelta(days=3), now)
    ancient = rank_boefje_task(now - timedelta(days=30), now)
    assert 2 < ancient <= old < recent


def test_delete_operation_creates_no_tasks(org_store: Store) -> None:
    source, clock = InProcessSource(), Clock()
    scheduler = make(BoefjeScheduler, org_store, clock, source)
    source.put({**mutation(), "operation": "delete"})
    scheduler.tick()
    assert queued(org_store, "boefje-acme") == []


def test_normalizer_tasks_match_mime_types_and_redelivery_is_idempotent(org_store: Store) -> None:
    source, clock = InProcessSource(), Clock()
    scheduler = make(NormalizerScheduler, org_store, clock, source)
    source.put(raw_file("raw-1", "boefje/dns"))
    source.put(raw_file("raw-2", "text/html", "text/xml"))
    source.put(raw_file("raw-3", "image/png"))
    scheduler.tick()
    tasks = queued(org_store, "normalizer-acme")
    pairs = sorted((task.data["normalizer"]["id"], task.data["raw_data"]["id"]) for task in tasks)
    assert pairs == [("norm-dns", str(as_uuid("raw-1"))), ("norm-html", str(as_uuid("raw-2")))]
    with org_store.session() as session:
        queue.pop(session, scheduler_id="normalizer-acme", limit=2)
    source.put(raw_file("raw-1", "boefje/dns"))  # the same event again, after its task was popped
    scheduler.tick()
    assert queued(org_store, "normalizer-acme") == []


def boefje_schedule(store: Store, boefje_id: str, input_ooi: str) -> Schedule:
    job = {"boefje": {"id": boefje_id}, "input_ooi": input_ooi, "organization": "acme"}
    with store.session() as session:
        return create_schedule(
            session,
            scheduler_id="boefje",
            organisation="acme",
            data=job,
            schedule=None,
            deadline_at=datetime(2026, 1, 6, tzinfo=UTC),
            schedule_hash=murmur_hex(f"{input_ooi}-{boefje_id}-acme"),
        )


def test_a_deschedule_raw_file_removes_the_boefjes_schedule_for_that_object(org_store: Store) -> None:
    """OpenKAT after v1.20.1 (mula's normalizer scheduler): a raw file with the mime type
    `openkat/deschedule` deletes the schedule of the boefje that made it, for its object (found by the
    boefje job's hash), and gets no normalizer task."""
    source, clock = InProcessSource(), Clock()
    scheduler = make(NormalizerScheduler, org_store, clock, source)
    host, other = "Hostname|internet|example.com", "Hostname|internet|other.example"
    gone = boefje_schedule(org_store, "dns", host)
    kept = [boefje_schedule(org_store, "dns", other), boefje_schedule(org_store, "ports", host)]
    raw = raw_file("raw-1", "boefje/dns", "openkat/deschedule")
    raw["raw_file"].update(boefje_id="dns", input_ooi=host)
    source.put(raw)
    scheduler.tick()
    with org_store.session() as session:
        assert session.get(Schedule, gone.id) is None
        assert all(session.get(Schedule, schedule.id) is not None for schedule in kept)
    assert queued(org_store, "normalizer-acme") == []  # norm-dns reads boefje/dns, but not this file
    source.put(raw)  # delivered again: nothing left to remove, nothing made
    scheduler.tick()
    assert queued(org_store, "normalizer-acme") == [] and scheduler.events_handled == 2


def test_malformed_event_is_rejected_and_the_rest_processed(org_store: Store) -> None:
    source, clock = InProcessSource(), Clock()
    scheduler = make(NormalizerScheduler, org_store, clock, source)
    source.put({"type": "raw_file_received", "raw_file": {"id": "x"}})
    source.put({"garbage": True})
    source.put(mutation())  # valid, but not for this scheduler
    source.put(raw_file("raw-1", "boefje/dns"))
    assert scheduler.tick() == 4
    assert len(source.rejected) == 3
    assert "mime_types" in source.rejected[0][1]
    assert "cannot handle" in source.rejected[2][1]
    assert len(queued(org_store, "normalizer-acme")) == 1


def test_full_queue_defers_events_until_there_is_room(org_store: Store) -> None:
    source, clock = InProcessSource(), Clock()
    scheduler = make(NormalizerScheduler, org_store, clock, source)
    scheduler.settings = Settings(database_url=org_store.url, poll_interval_seconds=0.01)
    for n in range(7):
        source.put(raw_file(f"raw-{n}", "boefje/dns"))
    scheduler.tick()
    assert len(queued(org_store, "normalizer-acme")) == 5  # maxsize
    with org_store.session() as session:
        queue.pop(session, scheduler_id="normalizer-acme", limit=5)
    scheduler.tick()
    raw_ids = set()
    with org_store.session() as session:
        for task in queue.list_tasks(session, scheduler_id="normalizer-acme", limit=100)[1]:
            raw_ids.add(task.data["raw_data"]["id"])
    assert raw_ids == {str(as_uuid(f"raw-{n}")) for n in range(7)}


def add_schedule(store: Store, cron: str, next_run_at: datetime) -> Schedule:
    with store.session() as session:
        return create_schedule(
            session,
            scheduler_id="report",
            organisation="acme",
            data={"report_recipe_id": "r", "organisation_id": "acme"},
            schedule=cron,
            deadline_at=next_run_at,
            schedule_hash=None,
        )


def test_report_schedule_fires_when_due_and_catches_up_missed_runs_once(org_store: Store) -> None:
    clock = Clock()
    scheduler = make(ReportScheduler, org_store, clock)
    schedule = add_schedule(org_store, "0 * * * *", clock.now + timedelta(minutes=30))
    assert scheduler.tick() == 0
    clock.now += timedelta(hours=5, minutes=10)  # five hourly runs were missed
    assert scheduler.tick() == 1
    assert scheduler.tick() == 0
    tasks = queued(org_store, "report-acme")
    assert len(tasks) == 1 and tasks[0].schedule_id == str(schedule.id)
    assert tasks[0].data == {"organisation_id": "acme", "report_recipe_id": "r"}  # OpenKAT's report job
    with org_store.session() as session:
        refreshed = session.get(Schedule, schedule.id)
        assert refreshed is not None
        assert refreshed.deadline_at == datetime(2026, 1, 5, 18, 0, tzinfo=UTC)
    clock.now = datetime(2026, 1, 5, 18, 0, 1, tzinfo=UTC)
    assert scheduler.tick() == 0  # its task still queued: the schedule waits for it (deadline kept)
    # The same recipe for the same organisation is the same work (OpenKAT's hash): while the first
    # report task still waits, the next run does not queue a second one.
    assert len(queued(org_store, "report-acme")) == 1


def test_a_due_report_schedule_whose_task_is_still_queued_keeps_its_deadline(org_store: Store) -> None:
    """mula: the push of the same report task is not allowed while it is queued, and the schedule's deadline
    is left as it is, so the run is tried again next round (not skipped until the next cron slot)."""
    clock = Clock()
    scheduler = make(ReportScheduler, org_store, clock)
    schedule = add_schedule(org_store, "0 * * * *", clock.now - timedelta(minutes=1))
    assert scheduler.tick() == 1
    due_again = datetime(2026, 1, 5, 13, 0, tzinfo=UTC)
    clock.now = due_again + timedelta(seconds=1)  # the next slot, the first task still queued
    assert scheduler.tick() == 0
    with org_store.session() as session:
        kept = session.get(Schedule, schedule.id)
        assert kept is not None and kept.deadline_at == due_again
    with org_store.session() as session:
        [popped] = queue.pop(session, scheduler_id="report-acme", limit=1)
    clock.now += timedelta(minutes=5)  # still in the same hour: the run that was waiting goes now
    assert scheduler.tick() == 1
    [task] = queued(org_store, "report-acme")
    assert task.id != popped.id and task.schedule_id == str(schedule.id)
    with org_store.session() as session:
        fired = session.get(Schedule, schedule.id)
        assert fired is not None and fired.deadline_at == datetime(2026, 1, 5, 14, 0, tzinfo=UTC)


def test_disabled_report_schedule_does_not_fire(org_store: Store) -> None:
    clock = Clock()
    scheduler = make(ReportScheduler, org_store, clock)
    schedule = add_schedule(org_store, "* * * * *", clock.now - timedelta(minutes=1))
    with org_store.session() as session:
        row = session.get(Schedule, schedule.id)
        assert row is not None
        row.enabled = False
    assert scheduler.tick() == 0


def test_scheduler_types_are_distinct() -> None:
    assert {BoefjeScheduler.type, NormalizerScheduler.type, ReportScheduler.type} == set(SchedulerType)
