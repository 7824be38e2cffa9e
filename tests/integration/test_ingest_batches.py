"""Batched ingest on both backends: a batch of events makes exactly the tasks that handling them one
at a time makes, and `push_many` leaves a queue as pushing one after another does."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from baton.core.errors import ConflictError, FencedError, NotFoundError, QueueDisabledError, QueueFullError
from baton.core.model import SchedulerSpec, TaskStatus
from baton.core.queueing import PopTarget, PushRequest
from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import PluginSpec
from baton.ingest.event_driven import EventDrivenScheduler
from baton.ingest.events import InProcessSource
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues import batch_push
from baton.storage.queues import operations as queues
from baton.storage.scheduling.plugins import seed_plugins
from baton.storage.tables import QueueCounter, Scheduler, Task

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PLUGINS = [
    PluginSpec(id="dns", type="boefje", name="DNS", consumes=["Hostname"], scan_level=1),
    PluginSpec(id="ports", type="boefje", name="Ports", consumes=["IPAddressV4", "Hostname"], scan_level=3),
    PluginSpec(id="norm-dns", type="normalizer", name="DNS n", consumes=["boefje/dns"]),
    PluginSpec(id="norm-html", type="normalizer", name="HTML n", consumes=["text/html", "text/xml"]),
    PluginSpec(id="norm-any", type="normalizer", name="Any n", consumes=["text/html", "boefje/dns"]),
]
T = TypeVar("T")


class Undo(Exception):
    """Raised to roll a session back after reading what it did."""


def undone(store: Store, work: Callable[[Session], T]) -> T:
    """What `work` returns, its writes rolled back."""
    answers: list[T] = []
    try:
        with store.session() as session:
            answers.append(work(session))
            raise Undo
    except Undo:
        pass
    return answers[0]


# -- push_many ---------------------------------------------------------------------------------------


def push(store: Store, queue: str, priority: int, digest: str | None) -> None:
    with store.session() as session:
        queues.push(session, PushRequest(queue=queue, priority=priority, data={"n": digest}, hash=digest), NOW)


def pop(store: Store, queue: str, limit: int) -> None:
    with store.session() as session:
        queues.pop(session, PopTarget(queue=queue), limit=limit, now=NOW)


@pytest.fixture
def two_queues(store: Store) -> Store:
    """acme (weight 2) is quiet: its clock is behind the head of priority 3, where a busy
    organisation has tasks queued; one of acme's tasks is queued (hash `twin`), one popped (`popped`)."""
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=0, weight=2)
        create_organisation(session, "busy", "Busy", maxsize=0)
    for n in range(10):
        push(store, "boefje-busy", 3, f"busy-{n}")
    pop(store, "boefje-busy", 5)
    push(store, "boefje-acme", 7, "popped")
    pop(store, "boefje-acme", 1)
    push(store, "boefje-acme", 5, "twin")
    return store


def request(priority: int, digest: str | None) -> PushRequest:
    return PushRequest(queue="boefje-acme", priority=priority, data={"n": digest}, hash=digest, task_id=uuid.uuid4())


BATCH = [
    request(3, "new-1"),  # starts at the head of priority 3, ahead of acme's clock
    request(1, "new-2"),
    request(4, "twin"),  # the queued twin moves to priority 4
    request(2, "dup"),
    request(3, "new-3"),
    request(7, "popped"),  # its twin is not queued: a new task
    request(6, "dup"),  # a twin of an earlier request of the batch: that task moves to priority 6
    request(3, None),
]


def queue_state(session: Session, results: list[queues.PushResult]) -> dict[str, Any]:
    tasks = session.execute(
        select(Task.id, Task.hash, Task.priority, Task.status, Task.fair_key)
        .where(Task.scheduler_id == "boefje-acme")
        .order_by(Task.seq)
    ).all()
    counters = session.execute(
        select(func.sum(QueueCounter.queued), func.max(QueueCounter.last_key)).where(
            QueueCounter.scheduler_id == "boefje-acme"
        )
    ).one()
    return {
        "results": [(result.outcome, result.task["id"]) for result in results],
        "tasks": [tuple(row) for row in tasks],
        "counters": tuple(counters),
    }


def test_push_many_leaves_the_queue_as_pushing_one_by_one_does(two_queues: Store) -> None:
    one_by_one = undone(two_queues, lambda session: queue_state(session, [queues.push(session, r, NOW) for r in BATCH]))
    together = undone(two_queues, lambda session: queue_state(session, queues.push_many(session, BATCH, NOW)))
    assert together == one_by_one
    outcomes = [outcome for outcome, _ in together["results"]]
    assert outcomes == ["created", "created", "updated", "created", "created", "created", "updated", "created"]


def test_push_many_is_refused_whole_when_the_queue_lacks_room(store: Store) -> None:
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=3)
    push(store, "boefje-acme", 5, "twin")
    push(store, "boefje-acme", 5, "other")
    fits = [request(1, "twin"), request(1, "new")]  # a twin takes no room
    assert [r.outcome for r in undone(store, lambda s: queues.push_many(s, fits, NOW))] == ["updated", "created"]
    with pytest.raises(QueueFullError), store.session() as session:
        queues.push_many(session, [request(1, "new"), request(1, "newer")], NOW)
    with store.session() as session:
        assert queues.recount(session, "boefje-acme") == (2, 0)
        session.get_one(Scheduler, "boefje-acme").enabled = False
    with pytest.raises(QueueDisabledError), store.session() as session:
        queues.push_many(session, [request(1, "new")], NOW)
    with pytest.raises(NotFoundError), store.session() as session:
        queues.push_many(session, [PushRequest(queue="boefje-nobody", priority=1, data={})], NOW)
    with store.session() as session:
        session.get_one(Scheduler, "boefje-acme").enabled = True
        taken = session.scalars(select(Task.id).where(Task.hash == "twin")).one()
    with pytest.raises(ConflictError), store.session() as session:
        queues.push_many(session, [PushRequest(queue="boefje-acme", priority=1, data={}, task_id=taken)], NOW)


def test_a_twin_queued_after_the_batch_looked_is_reprioritised_as_a_single_push_would(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another transaction may queue a twin between the batch's read and its insert: the insert skips
    that row and its request is pushed on its own, which finds the twin."""
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=0)
    push(store, "boefje-acme", 5, "twin")
    monkeypatch.setattr(batch_push.BatchPush, "_read_twins", lambda self: None)  # as if it came after the read
    with store.session() as session:
        results = queues.push_many(session, [request(1, "twin"), request(2, "new")], NOW)
    assert [(result.outcome, result.task["priority"]) for result in results] == [("updated", 1), ("created", 2)]
    with store.session() as session:
        assert queues.recount(session, "boefje-acme") == (2, 0)
        assert queues.queue_counts(session, "boefje-acme")["boefje-acme"] == (2, 0)


# -- schedulers ---------------------------------------------------------------------------------------


@pytest.fixture
def orgs(store: Store) -> Store:
    with store.session() as session:
        for org in ("batch", "single"):
            create_organisation(session, org, org, maxsize=0)
        seed_plugins(session, [spec.model_dump() for spec in PLUGINS])
    return store


def scheduler(
    kind: type[EventDrivenScheduler], store: Store, org: str, batch_size: int, grace_seconds: int = 3600
) -> EventDrivenScheduler:
    source = InProcessSource()
    context = SchedulerContext(
        store=store,
        settings=Settings(database_url=store.url, grace_period_seconds=grace_seconds),
        runner="test",
        location="here",
        source_factory=lambda spec: source,
        clock=lambda: NOW,
    )
    made = kind(SchedulerSpec(org, kind.type), context)
    made.batch_size = batch_size  # type: ignore[misc]
    made.setup()
    return made


def run_through(made: EventDrivenScheduler, events: list[dict[str, Any]]) -> InProcessSource:
    source = made.source
    assert isinstance(source, InProcessSource)
    for event in events:
        source.put(event)
    while made.tick():
        pass
    return source


def kat_raw(org: str, raw_id: uuid.UUID, meta_id: uuid.UUID, *mime_types: str) -> dict[str, Any]:
    meta = {"id": str(meta_id), "boefje": {"id": "dns"}, "organization": org, "arguments": {}}
    raw = {"id": str(raw_id), "boefje_meta": meta, "mime_types": [{"value": mime} for mime in mime_types]}
    return {"created_at": "2026-01-05T12:00:00Z", "organization": org, "raw_data": raw}


def raw_file(raw_id: str, *mime_types: str) -> dict[str, Any]:
    return {"type": "raw_file_received", "raw_file": {"id": raw_id, "mime_types": list(mime_types)}}


def normalizer_events(org: str) -> list[dict[str, Any]]:
    meta, first, second = uuid.uuid5(uuid.NAMESPACE_URL, org), uuid.uuid4(), uuid.uuid4()
    return [
        raw_file("raw-1", "boefje/dns"),
        raw_file("raw-2", "text/html", "text/xml"),
        raw_file("raw-1", "boefje/dns"),  # the same event twice in one batch
        raw_file("raw-3", "boefje/dns", "text/html"),  # three normalizers
        raw_file("raw-4", "error/boefje"),  # the boefje failed: no task
        kat_raw(org, first, meta, "boefje/dns"),
        kat_raw(org, second, meta, "boefje/dns"),  # same boefje run (same hash): its twin is reprioritised
        {"type": "scan_profile_mutation", "object": {"primary_key": "k", "object_type": "Hostname", "scan_level": 1}},
        {"type": "raw_file_received", "raw_file": {"id": "no-mime-types"}},
        raw_file("raw-5", "text/xml"),
    ]


def boefje_events() -> list[dict[str, Any]]:
    def mutation(key: str, object_type: str, level: int, operation: str = "update") -> dict[str, Any]:
        obj = {"primary_key": key, "object_type": object_type, "scan_level": level}
        return {"type": "scan_profile_mutation", "operation": operation, "object": obj}

    return [
        mutation("Hostname|internet|a.example", "Hostname", 3),  # dns and ports
        mutation("Hostname|internet|a.example", "Hostname", 3),  # within the grace period: nothing
        mutation("IPAddressV4|internet|1.2.3.4", "IPAddressV4", 2),  # ports needs 3
        mutation("IPAddressV4|internet|1.2.3.5", "IPAddressV4", 4),
        mutation("Hostname|internet|b.example", "Hostname", 1, "delete"),
        raw_file("raw-1", "boefje/dns"),  # not for this scheduler
        mutation("Hostname|internet|b.example", "Hostname", 1),
    ]


def made_tasks(store: Store, queue: str) -> list[tuple[Any, ...]]:
    """What a queue holds, without what differs between two organisations (ids, the organisation)."""
    with store.session() as session:
        tasks = session.scalars(select(Task).where(Task.scheduler_id == queue).order_by(Task.seq)).all()
        return sorted(
            (
                task.priority,
                task.status,
                (task.data.get("normalizer") or task.data.get("boefje") or {}).get("id"),
                task.data.get("input_ooi"),
                str(task.data.get("raw_data", {}).get("boefje_meta", {}).get("boefje")),
            )
            for task in tasks
        )


@pytest.mark.parametrize(
    ("kind", "grace_seconds"), [(NormalizerScheduler, 3600), (BoefjeScheduler, 3600), (BoefjeScheduler, 0)]
)
def test_a_batch_makes_the_tasks_that_one_event_at_a_time_makes(
    orgs: Store, kind: type[EventDrivenScheduler], grace_seconds: int
) -> None:
    events = {
        org: normalizer_events(org) if kind is NormalizerScheduler else boefje_events() for org in ("batch", "single")
    }
    batched = scheduler(kind, orgs, "batch", batch_size=100, grace_seconds=grace_seconds)
    single = scheduler(kind, orgs, "single", batch_size=1, grace_seconds=grace_seconds)
    batch_source = run_through(batched, events["batch"])
    single_source = run_through(single, events["single"])
    assert batched.events_handled == single.events_handled == len(events["batch"])
    assert made_tasks(orgs, batched.id) == made_tasks(orgs, single.id)
    assert made_tasks(orgs, batched.id), "the events made no tasks"
    assert sorted(reason for _, reason in batch_source.rejected) == sorted(
        reason for _, reason in single_source.rejected
    )
    assert batch_source.rejected, "no event was rejected"
    if kind is BoefjeScheduler:  # the object that came twice: again at once without a grace period
        priorities = [priority for priority, _, boefje, ooi, _ in made_tasks(orgs, batched.id) if "a.example" in ooi]
        assert priorities == ([170, 170] if grace_seconds == 0 else [2, 2])


def test_redelivered_events_make_no_second_task_in_one_batch_or_the_next(orgs: Store) -> None:
    made = scheduler(NormalizerScheduler, orgs, "batch", batch_size=100)
    run_through(made, [raw_file(f"raw-{n}", "boefje/dns") for n in range(5)])
    assert len(made_tasks(orgs, made.id)) == 10  # norm-dns and norm-any
    with orgs.session() as session:  # one task is done; its raw file's event comes again
        queues.pop(session, PopTarget(queue=made.id), limit=1, now=NOW)
    run_through(made, [raw_file(f"raw-{n}", "boefje/dns") for n in (0, 1, 2, 3, 4, 4)])
    tasks = made_tasks(orgs, made.id)
    assert len(tasks) == 10
    assert [status for _, status, *_ in tasks].count(TaskStatus.DISPATCHED.value) == 1


@contextmanager
def full_queue(store: Store, maxsize: int) -> Iterator[None]:
    with store.session() as session:
        session.get_one(Scheduler, "normalizer-batch").maxsize = maxsize
    yield


def test_a_full_queue_mid_batch_defers_the_rest_of_the_batch(orgs: Store) -> None:
    made = scheduler(NormalizerScheduler, orgs, "batch", batch_size=100)
    made.settings = Settings(database_url=orgs.url, poll_interval_seconds=0.01)
    with full_queue(orgs, 5):
        source = made.source
        assert isinstance(source, InProcessSource)
        for n in range(4):
            source.put(raw_file(f"raw-{n}", "boefje/dns"))  # two tasks each
        source.put({"garbage": True})
        assert made.tick() == 3  # the garbage (rejected at once) and two events: the third does not fit
        assert len(made_tasks(orgs, made.id)) == 4
        assert len(source.rejected) == 1
        with orgs.session() as session:
            queues.pop(session, PopTarget(queue=made.id), limit=4, now=NOW)
        while made.tick():
            pass
    assert len(made_tasks(orgs, made.id)) == 8
    assert made.events_handled == 5


def test_a_batch_from_a_source_that_writes_nothing_is_fenced_after_a_takeover(orgs: Store) -> None:
    """The batch's writes are its tasks alone (a RabbitMQ delivery settles nothing in the database):
    the bulk insert itself runs the fencing check, so nothing commits and the events go back."""
    made = scheduler(NormalizerScheduler, orgs, "batch", batch_size=100)
    assert made.tick() == 0  # claims the row; nothing to write
    with orgs.session() as session:
        session.execute(update(Scheduler).where(Scheduler.id == made.id).values(term=Scheduler.term + 1))
    source = made.source
    assert isinstance(source, InProcessSource)
    for n in range(3):
        source.put(raw_file(f"raw-{n}", "boefje/dns"))
    with pytest.raises(FencedError, match="no longer ours"):
        made.tick()
    assert made_tasks(orgs, made.id) == []
    assert len(source.receive(None, 100)) == 3  # type: ignore[arg-type]  # given back by the nacks
