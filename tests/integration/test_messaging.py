"""RabbitMQ against the real broker: ack after commit, restarts, dead letters, competing consumers."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import pika
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from baton.control import organisations_from_rabbitmq as control_organisations
from baton.control.organisations_from_rabbitmq import OrganisationWatcher, organisation_applier
from baton.control.runners import ThreadRunner
from baton.core import supervision
from baton.core.model import SchedulerSpec, SchedulerType, utcnow
from baton.core.queueing import PopTarget
from baton.core.settings import Settings
from baton.ingest import rabbitmq
from baton.ingest.catalogue.plugins_file import PluginSpec
from baton.ingest.events import (
    AnyEvent,
    OrganisationCreated,
    OrganisationDeleted,
    OrganisationRef,
    RawFileReceived,
    as_uuid,
)
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.ingest.rabbitmq import (
    DEAD_LETTER_QUEUE,
    ORGANISATIONS_QUEUE,
    OpenKatEventRouter,
    Publisher,
    RabbitMQSource,
    event_queue,
)
from baton.ingest.scheduler import SchedulerContext
from baton.runtime import scheduler_context
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.scheduling.plugins import seed_plugins
from baton.storage.tables import Organisation, Plugin, Scheduler, Task
from harness.servers import ThrowawayRabbitMQ
from harness.waiting import wait_until

NORMALIZERS = [PluginSpec(id="norm-a", type="normalizer", name="A", consumes=["text/a"])]


def new_org(store: Store) -> str:
    org = f"org{uuid.uuid4().hex[:10]}"
    with store.session() as session:
        create_organisation(session, org, org, maxsize=0)
        if not session.get(Plugin, "norm-a"):
            seed_plugins(session, [spec.model_dump() for spec in NORMALIZERS])
    return org


def normalizer(store: Store, amqp_url: str, org: str, **settings: Any) -> NormalizerScheduler:
    # Short leases: a scheduler killed mid-batch (below) holds its row until its lease ends.
    leases = {"retry_period_seconds": 0.2, "renew_deadline_seconds": 1.5, "lease_seconds": 2.0}
    config = Settings(database_url=store.url, poll_interval_seconds=0.02, **{**leases, **settings})
    context = SchedulerContext(
        store=store,
        settings=config,
        runner="test",
        location="here",
        source_factory=lambda spec: RabbitMQSource(amqp_url, event_queue(org, SchedulerType.NORMALIZER), prefetch=50),
    )
    return NormalizerScheduler(SchedulerSpec(org, SchedulerType.NORMALIZER), context)


def raw_event(raw_id: str) -> RawFileReceived:
    return RawFileReceived.model_validate(
        {"type": "raw_file_received", "raw_file": {"id": raw_id, "mime_types": ["text/a"]}}
    )


def task_count(store: Store, org: str) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(Task).where(Task.organisation == org)) or 0


def distinct_raw_ids(store: Store, org: str) -> set[str]:
    """The raw files that got a normalizer task (as UUIDs: Baton derives one from any other id)."""
    with store.session() as session:
        tasks = session.scalars(select(Task).where(Task.organisation == org)).all()
        ids = [task.data["raw_data"]["id"] for task in tasks]
    assert len(ids) == len(set(ids)), "a raw file got two normalizer tasks"
    return set(ids)


def as_uuids(raw_ids: Iterable[str]) -> set[str]:
    return {str(as_uuid(raw_id)) for raw_id in raw_ids}


def dead_letters(amqp_url: str, source_queue: str) -> list[tuple[bytes, str]]:
    """Drain the dead-letter queue; return (body, reason) of the messages that came from `source_queue`."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.queue_declare(DEAD_LETTER_QUEUE, durable=True)
    found = []
    while True:
        method, properties, body = channel.basic_get(DEAD_LETTER_QUEUE, auto_ack=True)
        if method is None:
            break
        headers = properties.headers or {}
        if headers.get("x-baton-queue") == source_queue:
            found.append((body, str(headers.get("x-baton-error"))))
    connection.close()
    return found


def run_in_thread(scheduler: NormalizerScheduler) -> threading.Thread:
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    return thread


def test_events_flow_from_rabbitmq_into_tasks(store: Store, amqp_url: str) -> None:
    org = new_org(store)
    publisher = Publisher(amqp_url)
    for n in range(20):
        publisher.publish_event(org, raw_event(f"raw{n}"))
    publisher.publish_event(org, raw_event("raw3"))  # a duplicate event
    scheduler = normalizer(store, amqp_url, org)
    thread = run_in_thread(scheduler)
    try:
        assert wait_until(lambda: scheduler.events_handled == 21, 30)
        assert distinct_raw_ids(store, org) == as_uuids(f"raw{n}" for n in range(20))
    finally:
        scheduler.stop()
        thread.join(10)
        publisher.close()


def test_events_flow_from_rabbitmq_into_tasks_on_a_workers_shared_thread(store: Store, amqp_url: str) -> None:
    """A worker's schedulers share threads (control/tickpool.py): their broker receives never wait."""
    org = new_org(store)
    publisher = Publisher(amqp_url)
    for n in range(20):
        publisher.publish_event(org, raw_event(f"raw{n}"))
    settings = Settings(
        database_url=store.url, amqp_url=amqp_url, amqp_enabled=True, poll_interval_seconds=0.02, scheduler_threads=1
    )
    context = scheduler_context(store, settings, "worker", broker_wait_seconds=0.0)
    context.leases().start_in_background()
    runner = ThreadRunner(context)
    spec = SchedulerSpec(org, SchedulerType.NORMALIZER)
    try:
        claims = context.leases().claim([spec.id], runner="worker")
        assert runner.launch_claimed([(spec, claims[spec.id])]) == [spec.id]
        assert wait_until(lambda: distinct_raw_ids(store, org) == as_uuids(f"raw{n}" for n in range(20)), 30)
        publisher.publish_event(org, raw_event("raw20"))  # one that arrives while the scheduler runs
        assert wait_until(lambda: distinct_raw_ids(store, org) == as_uuids(f"raw{n}" for n in range(21)), 30)
    finally:
        runner.shutdown()
        context.leases().stop()
        publisher.close()


def test_malformed_messages_go_to_the_dead_letter_queue_and_consuming_continues(store: Store, amqp_url: str) -> None:
    org = new_org(store)
    queue_name = event_queue(org, SchedulerType.NORMALIZER)
    publisher = Publisher(amqp_url)
    publisher.publish(queue_name, {"type": "raw_file_received", "raw_file": {"id": "x"}})  # no mime types
    publisher.publish(queue_name, {"something": "else"})
    channel = pika.BlockingConnection(pika.URLParameters(amqp_url)).channel()
    channel.basic_publish("", queue_name, b"\xff not json")
    publisher.publish_event(org, raw_event("good"))
    scheduler = normalizer(store, amqp_url, org)
    thread = run_in_thread(scheduler)
    try:
        assert wait_until(lambda: scheduler.events_handled == 4, 30)
        assert distinct_raw_ids(store, org) == as_uuids(["good"])
        letters = dead_letters(amqp_url, queue_name)
        assert len(letters) == 3
        assert any("mime_types" in reason for _, reason in letters)
        assert any(body == b"\xff not json" for body, _ in letters)
    finally:
        scheduler.stop()
        thread.join(10)
        publisher.close()


class CrashBeforeCommit(NormalizerScheduler):
    """Dies like a SIGKILL after handling an event but before the transaction commits."""

    def handle_batch(self, session: Session, events: Sequence[AnyEvent], now: datetime) -> list[dict[str, object]]:
        super().handle_batch(session, events, now)
        session.flush()
        os._exit(9)


def crash_child(url: str, amqp_url: str, org: str) -> None:
    store = Store(url)
    scheduler = normalizer(store, amqp_url, org)
    crashing = CrashBeforeCommit(scheduler.spec, scheduler.context)
    crashing.setup()
    crashing.tick()


def test_a_consumer_killed_between_receive_and_commit_gets_its_message_redelivered(store: Store, amqp_url: str) -> None:
    org = new_org(store)
    publisher = Publisher(amqp_url)
    publisher.publish_event(org, raw_event("only"))
    child = multiprocessing.get_context("spawn").Process(target=crash_child, args=(store.url, amqp_url, org))
    child.start()
    child.join(60)
    assert child.exitcode == 9, "the child did not die where intended"
    assert task_count(store, org) == 0  # nothing was committed
    scheduler = normalizer(store, amqp_url, org)
    thread = run_in_thread(scheduler)
    try:
        assert wait_until(lambda: task_count(store, org) == 1, 30), "the message was lost"
        time.sleep(0.5)
        assert distinct_raw_ids(store, org) == as_uuids(["only"])
    finally:
        scheduler.stop()
        thread.join(10)
        publisher.close()


def test_broker_restart_mid_stream_loses_and_duplicates_nothing(
    store: Store, private_rabbitmq: ThrowawayRabbitMQ
) -> None:
    """On a broker of its own: the other tests' broker stays up meanwhile."""
    amqp_url = private_rabbitmq.url
    org = new_org(store)
    total = 1000
    scheduler = normalizer(store, amqp_url, org)
    thread = run_in_thread(scheduler)
    published = threading.Event()

    def publish_all() -> None:
        publisher = Publisher(amqp_url, attempts=60)
        for n in range(total):
            publisher.publish_event(org, raw_event(f"raw{n}"))
        publisher.close()
        published.set()

    producer = threading.Thread(target=publish_all, daemon=True)
    producer.start()
    try:
        assert wait_until(lambda: task_count(store, org) >= 200, 60)
        private_rabbitmq.ctl("stop_app")
        time.sleep(1.0)
        private_rabbitmq.ctl("start_app")
        assert published.wait(180), "the publisher did not finish"
        assert wait_until(lambda: task_count(store, org) >= total, 180), task_count(store, org)
        time.sleep(1.0)  # any duplicate would arrive now
        assert distinct_raw_ids(store, org) == as_uuids(f"raw{n}" for n in range(total))
        assert task_count(store, org) == total
    finally:
        scheduler.stop()
        thread.join(10)


class Said:
    """A logger that remembers what it was told, as Baton's modules call theirs."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _say(self, level: str) -> Any:
        return lambda event, **_fields: self.lines.append((level, event))

    def __getattr__(self, level: str) -> Any:
        return self._say(level)


def test_a_broker_restart_is_one_outage_for_the_whole_process(
    pg_store: Store, private_rabbitmq: ThrowawayRabbitMQ, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many consumers a process runs (a worker of 200 organisations has 400 schedulers' sources,
    an event router and an organisation watcher), a broker restart is one warning when it begins and one
    line when it ends: they report their attempts to the process's BROKER tracker and none logs the
    outage itself (each consumer did, once per outage: hundreds of lines per restart), and a consumer whose
    connection is still open while the broker shuts down does not end the outage."""
    amqp_url = private_rabbitmq.url
    said = Said()
    for module in (rabbitmq, supervision, control_organisations):
        monkeypatch.setattr(module, "log", said)
    monkeypatch.setattr(rabbitmq.BROKER, "_log", said)
    tag = uuid.uuid4().hex[:8]
    # Enough of them that the broker, closing their connections one by one as it stops, is still
    # serving some when others fail (they used to end the outage the others began, over and over).
    sources = [RabbitMQSource(amqp_url, f"outage-{tag}-{n}", wait_seconds=0.0) for n in range(20)]
    services = [
        OpenKatEventRouter(amqp_url, pg_store, auto_organisations=False, maxsize=0),
        OrganisationWatcher(amqp_url, lambda event: None),
    ]

    def receive_all() -> bool:
        """Every source takes its turn; True when each is connected."""
        for source in sources:
            source.receive(None, 10)  # type: ignore[arg-type]  # a broker source does not use the session
        return all(source._channel is not None for source in sources)

    for service in services:
        service.start_in_background()
    try:
        assert wait_until(lambda: receive_all() and rabbitmq.BROKER.available, 30)
        said.lines.clear()
        private_rabbitmq.ctl("stop_app")
        try:
            assert wait_until(lambda: not receive_all() and not rabbitmq.BROKER.available, 30)
        finally:
            private_rabbitmq.ctl("start_app")
        assert wait_until(lambda: receive_all() and rabbitmq.BROKER.available, 60)
        time.sleep(2.0)  # the router and the watcher are connected again by now (backoff at most 1 s)
    finally:
        for service in services:
            service.stop()
        for source in sources:
            source.close()
    warnings = [event for level, event in said.lines if level == "warning"]
    assert warnings == ["broker unavailable"], said.lines
    assert [event for _level, event in said.lines if "again" in event] == ["broker available again"], said.lines


def test_a_second_instance_of_a_scheduler_waits_for_the_first_and_takes_over_without_duplicates(
    store: Store, amqp_url: str
) -> None:
    """One scheduler per queue, by lease: a second instance (a restarted pod, an overlapping
    leader) consumes nothing while the first holds the row, and carries on where it stopped."""
    org = new_org(store)
    first, second = normalizer(store, amqp_url, org), normalizer(store, amqp_url, org)
    for scheduler in (first, second):
        scheduler.batch_size = 10  # type: ignore[misc]
    threads = [run_in_thread(first)]
    assert wait_until(lambda: first.claim is not None, 30)
    threads.append(run_in_thread(second))
    publisher = Publisher(amqp_url)
    try:
        for n in range(200):
            publisher.publish_event(org, raw_event(f"raw{n % 150}"))  # 50 events arrive twice
        assert wait_until(lambda: first.events_handled == 200, 60)
        assert second.events_handled == 0 and second.claim is None  # it waits for the lease
        first.stop()  # a graceful stop gives the row up: the second claims it at once
        threads[0].join(10)
        assert wait_until(lambda: second.claim is not None, 30)
        for n in range(200, 300):
            publisher.publish_event(org, raw_event(f"raw{n % 150}"))  # all of them seen before
        assert wait_until(lambda: second.events_handled == 100, 60)
        assert distinct_raw_ids(store, org) == as_uuids(f"raw{n}" for n in range(150))
        assert task_count(store, org) == 150
    finally:
        for scheduler in (first, second):
            scheduler.stop()
        for thread in threads:
            thread.join(10)
        publisher.close()


def queue_depth(amqp_url: str, queue_name: str) -> int:
    """Messages ready in a queue (unacked ones of a live consumer are not counted)."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    depth = connection.channel().queue_declare(queue_name, durable=True, passive=True).method.message_count
    connection.close()
    return int(depth)


def test_batches_are_acked_after_their_commit_and_a_full_queue_defers_the_rest(store: Store, amqp_url: str) -> None:
    org = new_org(store)
    queue_id = f"normalizer-{org}"
    with store.session() as session:
        session.get_one(Scheduler, queue_id).maxsize = 150
    queue_name = event_queue(org, SchedulerType.NORMALIZER)
    publisher = Publisher(amqp_url)
    for n in range(250):
        publisher.publish_event(org, raw_event(f"raw{n}"))
        if n == 10:  # valid, but not for a normalizer scheduler
            publisher.publish(queue_name, {"type": "scan_profile_mutation", "object": {"primary_key": "k"}})
        if n == 120:
            publisher.publish(queue_name, {"type": "scan_profile_mutation", **SCAN_PROFILE})
    publisher.close()
    scheduler = normalizer(store, amqp_url, org)
    thread = run_in_thread(scheduler)
    try:
        assert wait_until(lambda: task_count(store, org) == 150, 30)
        time.sleep(0.5)  # the rest waits for room, in RabbitMQ
        assert task_count(store, org) == 150
        with store.session() as session:
            queues.pop(session, PopTarget(queue=queue_id), limit=150, now=utcnow())
        assert wait_until(lambda: scheduler.events_handled == 252, 30)
    finally:
        scheduler.stop()
        thread.join(10)
    assert queue_depth(amqp_url, queue_name) == 0, "a handled message was not acked"
    assert distinct_raw_ids(store, org) == as_uuids(f"raw{n}" for n in range(250))
    reasons = [reason for _, reason in dead_letters(amqp_url, queue_name)]
    assert len(reasons) == 2
    assert any("malformed" in reason for reason in reasons) and any("cannot handle" in reason for reason in reasons)


SCAN_PROFILE = {"object": {"primary_key": "k", "object_type": "Hostname", "scan_level": 1}}


def organisation_exists(store: Store, org: str) -> bool:
    with store.session() as session:
        return session.get(Organisation, org) is not None


def test_director_watcher_applies_organisation_events_and_dead_letters_garbage(store: Store, amqp_url: str) -> None:
    org = f"org{uuid.uuid4().hex[:10]}"
    settings = Settings(database_url=store.url)
    watcher = OrganisationWatcher(amqp_url, organisation_applier(store, settings))
    publisher = Publisher(amqp_url)
    watcher.start_in_background()
    try:
        publisher.publish_organisation(OrganisationCreated(organisation=OrganisationRef(id=org, name="Org")))
        publisher.publish_organisation(OrganisationCreated(organisation=OrganisationRef(id=org, name="Org")))
        assert wait_until(lambda: organisation_exists(store, org), 30)
        publisher.publish(ORGANISATIONS_QUEUE, {"type": "organisation.renamed", "organisation": {"id": org}})
        publisher.publish_organisation(OrganisationDeleted(organisation=OrganisationRef(id=org)))
        assert wait_until(lambda: not organisation_exists(store, org), 30)
        letters = [reason for body, reason in dead_letters(amqp_url, ORGANISATIONS_QUEUE) if org.encode() in body]
        assert len(letters) == 1 and "renamed" in letters[0]
    finally:
        watcher.stop()
        publisher.close()


def test_baton_publish_cli(amqp_url: str) -> None:
    org = f"org{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "BATON_AMQP_URL": amqp_url}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "baton",
            "publish",
            "raw-file-received",
            org,
            "--raw-id",
            "r1",
            "--mime-type",
            "text/a",
            "--mime-type",
            "text/b",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    method, _, body = connection.channel().basic_get(event_queue(org, SchedulerType.NORMALIZER), auto_ack=True)
    connection.close()
    assert method is not None
    assert json.loads(body) == {
        "type": "raw_file_received",
        "raw_file": {"id": "r1", "mime_types": ["text/a", "text/b"], "boefje_id": None, "input_ooi": None},
    }


@pytest.mark.parametrize("kind", ["scan-profile-mutation"])
def test_baton_publish_rejects_bad_arguments(amqp_url: str, kind: str) -> None:
    env = {**os.environ, "BATON_AMQP_URL": amqp_url}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "baton",
            "publish",
            kind,
            "acme",
            "--object",
            "k",
            "--object-type",
            "Hostname",
            "--scan-level",
            "7",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "scan_level" in result.stdout + result.stderr


def test_director_driven_entirely_through_rabbitmq(store: Store, amqp_url: str) -> None:
    from baton.runtime import RunnerKind, director_services

    org = f"org{uuid.uuid4().hex[:10]}"
    with store.session() as session:
        if not session.get(Plugin, "norm-a"):
            seed_plugins(session, [spec.model_dump() for spec in NORMALIZERS])
    settings = Settings(
        database_url=store.url,
        amqp_url=amqp_url,
        amqp_enabled=True,
        poll_interval_seconds=0.05,
        retry_period_seconds=0.2,
        reconcile_interval_seconds=0.1,
    )
    services = director_services(store, settings, RunnerKind.thread)
    for service in services:
        service.start_in_background()
    publisher = Publisher(amqp_url)
    try:
        publisher.publish_organisation(OrganisationCreated(organisation=OrganisationRef(id=org)))
        publisher.publish_event(org, raw_event("r1"))
        assert wait_until(lambda: task_count(store, org) == 1, 60)
        publisher.publish_organisation(OrganisationDeleted(organisation=OrganisationRef(id=org)))
        assert wait_until(lambda: not organisation_exists(store, org), 30)
        director = services[-1]
        assert wait_until(lambda: all(spec.organisation != org for spec in director.runner.list()), 30)
    finally:
        for service in reversed(services):
            service.stop()
        publisher.close()


def test_openkats_own_queues_are_routed_to_the_schedulers(store: Store, amqp_url: str) -> None:
    """Octopoes and Bytes publish to `scan_profile_mutations` and `raw_file_received` (one queue each
    for all organisations); the router puts each message in its scheduler's inbox, creating an
    organisation it has not seen, and dead-letters what it cannot read."""
    from baton.ingest.events import DatabaseInbox
    from baton.ingest.planners.boefje import BoefjeScheduler
    from baton.ingest.rabbitmq import OpenKatEventRouter
    from baton.storage.scheduling.plugins import seed_plugins as seed

    with store.session() as session:
        if not session.get(Plugin, "dns-records"):
            seed(session, [{"id": "dns-records", "type": "boefje", "name": "DNS", "consumes": ["Hostname"]}])
        if not session.get(Plugin, "norm-a"):
            seed(session, [spec.model_dump() for spec in NORMALIZERS])
    org = f"kat{uuid.uuid4().hex[:8]}"  # unknown to Baton until its first message
    publisher = Publisher(amqp_url)
    reference = "Hostname|internet|example.com"
    publisher.publish(
        "scan_profile_mutations",
        {
            "operation": "create",
            "primary_key": reference,
            "value": {
                "primary_key": reference,
                "object_type": "Hostname",
                "scan_profile": {"scan_profile_type": "declared", "reference": reference, "level": 1, "user_id": None},
            },
            "client_id": org,
        },
    )
    boefje_meta = {
        "id": str(uuid.uuid4()),
        "boefje": {"id": "dns-records"},
        "input_ooi": reference,
        "arguments": {},
        "organization": org,
        "started_at": "2026-01-01T10:00:00Z",
        "ended_at": "2026-01-01T10:00:01Z",
    }
    raw = {"id": str(uuid.uuid4()), "boefje_meta": boefje_meta, "mime_types": [{"value": "text/a"}]}
    publisher.publish("raw_file_received", {"created_at": "2026-01-01T10:00:02Z", "organization": org, "raw_data": raw})
    publisher.publish("raw_file_received", {"organization": org, "raw_data": {"id": "not-a-uuid"}})
    publisher.close()
    router = OpenKatEventRouter(amqp_url, store, auto_organisations=True, maxsize=0)
    router.start_in_background()
    try:
        assert wait_until(lambda: router.routed >= 2, 30)
    finally:
        router.stop()
    assert dead_letters(amqp_url, "raw_file_received"), "the malformed message was dead-lettered"
    config = Settings(database_url=store.url)
    for kind in (BoefjeScheduler, NormalizerScheduler):
        spec = SchedulerSpec(org, kind.type)
        context = SchedulerContext(store, config, "test", "here", source_factory=lambda spec: DatabaseInbox(spec.id))
        scheduler = kind(spec, context)
        scheduler.setup()
        assert scheduler.tick() == 1
        scheduler.teardown()
    with store.session() as session:
        made = session.scalars(select(Task).where(Task.organisation == org).order_by(Task.type)).all()
        assert [task.type for task in made] == ["boefje", "normalizer"]
        assert made[0].data["input_ooi"] == reference and made[1].data["raw_data"]["id"] == raw["id"]
