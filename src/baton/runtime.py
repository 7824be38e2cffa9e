"""The one place that wires Baton together: which store, which event sources, which runner, which
elector, which services run beside the API. The command line calls these; nothing else builds
the runtime.

Heavy imports (FastAPI, uvicorn, the Kubernetes client, ingest and control) happen inside the function
that needs them, so a stand-alone scheduler process loads only what a scheduler uses, and an API replica
(`baton serve --no-director`) only what serving uses (ingest's catalogue file only to seed it).
"""

from __future__ import annotations

import gc
import math
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.model import RunnerKind, SchedulerSpec, SchedulerType
from baton.core.settings import OpenKatSettings, Settings
from baton.storage.engine import (
    Store,
    database_error,
    migrate_store,
    open_store,
    open_store_when_reachable,
    require_current_schema,
)

log = get_logger("baton.runtime")


class Service(Protocol):
    def start_in_background(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...


# -- the store -----------------------------------------------------------------------------------------


def prepare_store(settings: Settings) -> Store:
    """Open the store, apply migrations and seed the plugin catalogue (idempotent)."""
    from baton.ingest.catalogue.plugins_file import seed_catalogue

    store = open_store(settings.database_url, settings.database_schema)
    migrate_store(store)
    try:
        with store.session() as session:
            seed_catalogue(session, settings.plugins_file)
    except OSError as exc:
        raise database_error(exc, settings.database_url, settings.database_schema) from exc
    return store


def current_store(settings: Settings, wait_for_database: bool = False) -> Store:
    """Open the store without migrating; refuse a database whose schema is not current. With
    `wait_for_database`, wait out an outage instead of failing (a director's child)."""
    url, schema = settings.database_url, settings.database_schema
    store = open_store_when_reachable(url, schema=schema) if wait_for_database else open_store(url, schema)
    require_current_schema(store)
    return store


# -- schedulers' event sources ------------------------------------------------------------------------


def source_factory(settings: Settings, broker_wait_seconds: float | None = None) -> Callable[[SchedulerSpec], Any]:
    """Where a scheduler's events come from: the HTTP inbox, plus RabbitMQ when it is enabled.
    `broker_wait_seconds`: how long a receive may wait for a message (None: the source's default)."""

    from baton.ingest.events import CompositeSource, DatabaseInbox, EventSource

    def make(spec: SchedulerSpec) -> EventSource | None:
        if spec.type is SchedulerType.REPORT:
            return None
        inbox = DatabaseInbox(spec.id)
        if not settings.amqp.enabled:
            return inbox
        from baton.ingest.rabbitmq import RabbitMQSource, event_queue

        wait = {} if broker_wait_seconds is None else {"wait_seconds": broker_wait_seconds}
        queue = event_queue(spec.organisation, spec.type)
        return CompositeSource([inbox, RabbitMQSource(settings.amqp.url, queue, settings.amqp.prefetch, **wait)])

    return make


def scheduler_context(store: Store, settings: Settings, runner: str, broker_wait_seconds: float | None = None) -> Any:
    from baton.ingest.scheduler import SchedulerContext

    context = SchedulerContext(
        store=store,
        settings=settings,
        runner=runner,
        location=process_location(),
        source_factory=source_factory(settings, broker_wait_seconds),
    )
    if settings.openkat.katalogus_url:  # KATalogus is the catalogue (ingest/outside_links.py)
        from baton.ingest.catalogue.lookups import KatalogusCatalogue
        from baton.ingest.outside_links import outside_links

        context.links = outside_links(store, settings)
        context.catalogue = KatalogusCatalogue()
    return context


# -- director mode -------------------------------------------------------------------------------------


def build_director(store: Store, settings: Settings, runner_kind: RunnerKind) -> Any:
    from baton.control.director import Director
    from baton.control.leadership import DatabaseLeaseLeader
    from baton.control.runners import ProcessRunner, ThreadRunner

    if runner_kind is RunnerKind.kubernetes:
        return build_kubernetes_director(store, settings)
    if runner_kind is RunnerKind.thread:
        runner: Any = ThreadRunner(scheduler_context(store, settings, "thread"))
    else:
        runner = ProcessRunner(store, settings.database_url)
    holder = process_location()
    return Director(store, settings, runner, DatabaseLeaseLeader(store, holder, settings.leases), holder=holder)


def build_kubernetes_director(store: Store, settings: Settings) -> Any:
    """Pods via the official client; leadership via a coordination.k8s.io Lease."""
    from baton.control.director import Director
    from baton.control.kubernetes import KubernetesRunner, LeaseElector, load_api_client

    api, namespace = load_api_client(settings)
    identity = os.environ.get("POD_NAME") or process_location()
    elector = LeaseElector(
        api,
        namespace,
        settings.k8s.lease_name,
        identity,
        lease_seconds=math.ceil(settings.leases.lease_seconds),
        renew_deadline_seconds=settings.leases.renew_deadline_seconds,
    )
    return Director(store, settings, KubernetesRunner(api, settings, namespace), elector, holder=identity)


def director_services(store: Store, settings: Settings, runner_kind: RunnerKind) -> list[Service]:
    """The director and what feeds it organisations: RabbitMQ's watcher (when enabled), KATalogus' (when
    configured)."""
    services: list[Service] = [build_director(store, settings, runner_kind)]
    return [*amqp_services(store, settings), *katalogus_services(store, settings), *services]


def amqp_services(store: Store, settings: Settings) -> list[Service]:
    """With RabbitMQ enabled: Baton's organisation events, and OpenKAT's own queues routed into the
    schedulers' inboxes."""
    if not settings.amqp.enabled:
        return []
    from baton.control.organisations_from_rabbitmq import OrganisationWatcher, organisation_applier
    from baton.ingest.rabbitmq import OpenKatEventRouter

    return [
        OrganisationWatcher(settings.amqp.url, organisation_applier(store, settings)),
        OpenKatEventRouter(settings.amqp.url, store, settings.auto_organisations, settings.queue_maxsize),
    ]


def katalogus_services(store: Store, settings: Settings) -> list[Service]:
    """With KATalogus configured: its organisations, read by whichever process holds the `katalogus` lease."""
    if not settings.openkat.katalogus_url:
        return []
    from baton.control.organisations_from_katalogus import katalogus_services as services

    return list(services(store, settings))


def run_until_signalled(services: Sequence[Service]) -> None:
    """Start the services, wait for SIGTERM or SIGINT, stop them in reverse order."""
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    for service in services:
        service.start_in_background()
    stop.wait()
    for service in reversed(services):
        service.stop()


def run_director(settings: Settings, runner_kind: RunnerKind) -> None:
    store = prepare_store(settings)
    run_until_signalled(director_services(store, settings, runner_kind))


# -- worker mode -------------------------------------------------------------------------------------


def build_worker(store: Store, settings: Settings) -> Any:
    from baton.control.workers import RUNNER_NAME, Worker

    # A worker's schedulers share a few threads: a receive takes what the broker has sent, never waits.
    return Worker(store, settings, scheduler_context(store, settings, RUNNER_NAME, broker_wait_seconds=0.0))


def build_housekeeper(store: Store, settings: Settings) -> Any:
    """Stuck-task recovery and the retention of finished tasks, by one worker at a time (no
    director runs beside workers to do it)."""
    from baton.control.housekeeping import Housekeeper

    return Housekeeper(store, settings)


def run_worker(settings: Settings) -> None:
    """Schedulers shared with every other `baton worker` on the database; RabbitMQ's organisation
    events and OpenKAT's queues are consumed here too when enabled (competing consumers), and KATalogus'
    organisations read (by the one process holding the `katalogus` lease)."""
    store = prepare_store(settings)
    services = [
        *amqp_services(store, settings),
        *katalogus_services(store, settings),
        build_worker(store, settings),
        build_housekeeper(store, settings),
    ]
    run_until_signalled(services)


# -- the API --------------------------------------------------------------------------------------------


def metrics_for(store: Store, openkat: OpenKatSettings | None = None) -> Any:
    """An app's metrics over `store` (`baton.service.metrics.Metrics`): its own registry."""
    from baton.service.metrics import Metrics
    from baton.service.outside_services import OutsideServices
    from baton.storage.errors import DATABASE
    from baton.storage.ports.metrics import MetricRecords, ServiceStateRecords

    outside = OutsideServices(ServiceStateRecords(store), openkat or OpenKatSettings())
    return Metrics(MetricRecords(store), outside, DATABASE)


def app_services(settings: Settings, store: Store) -> Any:
    """The services an API app serves with, over `store` (`baton.service.app_services.AppServices`)."""
    from baton.service.app_services import AppServices
    from baton.service.events import Events
    from baton.service.metrics import Metrics
    from baton.service.organisations import Organisations
    from baton.service.plugins import Plugins
    from baton.service.queues import QueueService
    from baton.service.schedulers import Schedulers
    from baton.service.schedules import Schedules
    from baton.service.status import StatusService
    from baton.service.tasks import Tasks
    from baton.service.token_cache import TokenCache
    from baton.storage.ports.events import Inboxes
    from baton.storage.ports.organisations import OrganisationRecords
    from baton.storage.ports.plugins import PluginRecords
    from baton.storage.ports.schedulers import SchedulerRecords
    from baton.storage.ports.schedules import ScheduleRecords
    from baton.storage.ports.tasks import TaskListings
    from baton.storage.ports.tokens import TokenRecords
    from baton.storage.queues.door import QueueDoor

    metrics: Metrics = metrics_for(store, settings.openkat)

    def queue_service() -> QueueService:
        """A queue service of its own: its door's pool and wake-ups' listener belong to the event loop
        that makes it (the server's), and are closed with it (`QueueService.close`)."""
        door = QueueDoor(
            store,
            deduplicate=settings.openkat.deduplicate,
            group_pops=settings.group_pops,
            receipt_seconds=settings.pop_receipt_seconds,
        )
        service: QueueService = queue_service_for(settings, store, door, metrics)
        return service

    def status_service(queues: QueueService, broker: Any) -> StatusService:
        service: StatusService = status_service_for(settings, store, queues, metrics, broker)
        return service

    return AppServices(
        settings=settings,
        database=store,
        metrics=metrics,
        tokens=TokenCache(TokenRecords(store)),
        organisations=Organisations(OrganisationRecords(store), settings.queue_maxsize),
        plugins=Plugins(PluginRecords(store)),
        schedules=Schedules(ScheduleRecords(store), settings.auto_organisations, settings.queue_maxsize),
        schedulers=Schedulers(SchedulerRecords(store), settings.timing.heartbeat_timeout_seconds),
        events=Events(Inboxes(store)),
        tasks=Tasks(TaskListings(store)),
        queue_service=queue_service,
        status_service=status_service,
        broker=lambda: broker_probe(settings),
        broker_queues=broker_queues,
    )


def queue_service_for(settings: Settings, store: Store, door: Any, metrics: Any) -> Any:
    """The queue service over `store` and its queue door (`baton.service.queues.QueueService`), with the
    wake-ups of the store's backend."""
    from baton.service.queues import QueueService
    from baton.storage.ports.queues import QueueRecords
    from baton.storage.queues.wakeups import wakeups_for

    wakeups = wakeups_for(store, settings.pop_recheck_seconds, settings.pop_listen_check_seconds)
    return QueueService(QueueRecords(store), settings, door, metrics, wakeups)


def status_service_for(settings: Settings, store: Store, queues: Any, metrics: Any, broker: Any = None) -> Any:
    """The status page's service over `store` (`baton.service.status.StatusService`)."""
    from baton.service.operator import OperatorActions
    from baton.service.status import StatusService
    from baton.storage.ports.operator import TaskActions
    from baton.storage.ports.status import StatusReads

    return StatusService(StatusReads(store), OperatorActions(TaskActions(store)), settings, queues, metrics, broker)


def broker_queues(organisations: Sequence[str]) -> tuple[str, list[str]]:
    """The status page's look at RabbitMQ: the dead-letter queue and the queues worth a look,
    organisation events and each scheduler's."""
    from baton.ingest.rabbitmq import DEAD_LETTER_QUEUE, EVENT_QUEUE_SUFFIX, ORGANISATIONS_QUEUE, event_queue

    names = [ORGANISATIONS_QUEUE]
    for organisation in organisations:
        names += [event_queue(organisation, kind) for kind in EVENT_QUEUE_SUFFIX]
    return DEAD_LETTER_QUEUE, names


def broker_probe(settings: Settings) -> Any:
    """The status page's RabbitMQ probe (None: RabbitMQ is not configured)."""
    if not settings.amqp.enabled:
        return None
    from baton.ingest.rabbitmq import connect
    from baton.service.status import BrokerProbe

    url = settings.amqp.url
    return BrokerProbe(lambda: connect(url))


def build_app(settings: Settings, store: Store | None = None, services: Sequence[Service] = ()) -> Any:
    """The API over `store` (by default one of BATON_DATABASE_URL, connected at its first use); `services`
    (e.g. the embedded director) start and stop with the server."""
    from baton.api import create_app

    store = store if store is not None else Store(settings.database_url, settings.database_schema)
    return create_app(app_services(settings, store), services=services)


def serve(settings: Settings, with_director: bool) -> None:
    """The HTTP API (on BATON_HTTP_SERVER, with BATON_WORKERS processes) and, optionally, a thread-runner
    director.

    Where the server runs the app in this process, the director starts and stops with the app; where it
    serves from worker processes (several workers, or granian), the director runs once, in this
    supervising process, not in each worker, and stops after the server has stopped.
    """
    from baton import http_server

    store = prepare_store(settings)
    if not settings.auth_required:
        log.warning(
            "authentication is OFF: anyone who can reach the API can push and pop",
            host=settings.host,
            hint="set BATON_AUTH=on, or listen on a non-loopback address, to require tokens",
        )
    services = director_services(store, settings, RunnerKind.thread) if with_director else []
    if http_server.serves_in_process(settings):
        app = build_app(settings, store, services)
        settle_garbage_collector()
        http_server.run_app(settings, app)
        return
    for service in services:
        service.start_in_background()
    try:
        # Each worker process builds its own app from the environment (the same settings).
        os.environ["BATON_DATABASE_URL"] = settings.database_url
        http_server.run_workers(settings)
    finally:
        for service in reversed(services):
            service.stop()


def worker_app() -> Any:
    """The app of one API worker process (`http_server.WORKER_APP`: BATON_WORKERS > 1, or granian):
    settings from the environment."""
    from baton.core.logging import configure_logging

    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    app = build_app(settings, open_store(settings.database_url, settings.database_schema))
    settle_garbage_collector()
    return app


def settle_garbage_collector() -> None:
    """Everything built at start-up lives as long as the server: move it out of the collector's way,
    and collect the young generation less often (a request allocates a few hundred short-lived
    objects; the default threshold runs a collection every few requests)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


# -- stand-alone mode -------------------------------------------------------------------------------------


def run_standalone(
    settings: Settings, spec: SchedulerSpec, runner_name: str, stop_timeout: float, leader_term: int | None = None
) -> None:
    """Exactly one scheduler in the foreground; SIGTERM/SIGINT stop it, `stop_timeout` bounds that.
    With `leader_term` (a director's child), it claims its row only while that term leads."""
    from baton.core.errors import ConfigurationError
    from baton.ingest.registry import build_scheduler
    from baton.storage.tables import Scheduler as SchedulerRow

    # A director's child waits out a database outage: its director supervises it, and exiting would
    # only cost a restart (a fresh interpreter, the restart back-off) once the database is back.
    store = current_store(settings, wait_for_database=leader_term is not None)
    with store.session() as session:
        if session.get(SchedulerRow, spec.id) is None:
            raise ConfigurationError(
                f"organisation '{spec.organisation}' not found (no queue '{spec.id}'); create it first "
                "(POST /organisations or `baton publish organisation-created`)"
            )
    context = scheduler_context(store, settings, runner_name)
    ownership = context.leases()
    ownership.leader_term = leader_term
    scheduler = build_scheduler(spec, context)

    def _on_signal(signum: int, _frame: Any) -> None:
        scheduler.stop()
        # The deadline: a stop that hangs must not keep the container alive forever.
        timer = threading.Timer(stop_timeout, lambda: os._exit(1))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        scheduler.run()
    finally:
        ownership.stop(stop_timeout)
        store.dispose()
