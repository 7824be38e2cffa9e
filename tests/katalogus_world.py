"""A Baton with KATalogus as its catalogue, for tests: the KATalogus and Octopoes stand-ins served over real
HTTP, one organisation's schedulers built as a process builds them (a shared link, KatalogusCatalogue), a
clock the test moves (the poll is counted on it), events put in by hand."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from baton.core.model import SchedulerSpec, TaskStatus
from baton.core.settings import Settings
from baton.ingest.catalogue.lookups import KatalogusCatalogue
from baton.ingest.events import InProcessSource
from baton.ingest.outside_links import OutsideLinks, OutsideServiceRecorder
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.openkat import KatalogusClient, OctopoesClient
from baton.openkat.http import RetryPolicy, ServiceClient
from baton.storage.control.organisations import create_organisation
from baton.storage.control.scheduler_leases import release_claims
from baton.storage.engine import Store
from baton.storage.tables import Task
from harness.standins import KatalogusStandin, OctopoesStandin, StandinServer
from tests import queue_api as queue

POLL_SECONDS = 60.0
FAST_RETRIES = RetryPolicy(retries=1, initial=0.01, maximum=0.02)
PLUGINS_CALL = "GET /v1/organisations/{organisation_id}/plugins"
OBJECTS_CALL = "GET /{client}/objects"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class World:
    store: Store
    katalogus: KatalogusStandin
    katalogus_server: StandinServer
    octopoes: OctopoesStandin
    octopoes_server: StandinServer
    link: OutsideLinks
    clock: Clock = field(default_factory=Clock)
    sources: dict[str, InProcessSource] = field(default_factory=dict)

    def context(self, **settings: Any) -> SchedulerContext:
        return SchedulerContext(
            store=self.store,
            settings=Settings(database_url=self.store.url, grace_period_seconds=3600, **settings),
            runner="test",
            location="here",
            source_factory=lambda spec: self.sources.setdefault(spec.id, InProcessSource()),
            catalogue=KatalogusCatalogue(),
            clock=self.clock,
            links=self.link,
        )

    def scheduler(self, kind: type[Any], org: str = "acme", **settings: Any) -> Any:
        scheduler = kind(SchedulerSpec(org, kind.type), self.context(**settings))
        scheduler.setup()
        return scheduler

    def boefjes(self, org: str = "acme") -> BoefjeScheduler:
        scheduler: BoefjeScheduler = self.scheduler(BoefjeScheduler, org)
        return scheduler

    def put(self, queue_id: str, *events: dict[str, Any]) -> None:
        source = self.sources.setdefault(queue_id, InProcessSource())
        for event in events:
            source.put(event)

    def waiting(self, queue_id: str) -> int:
        return self.sources[queue_id]._queue.qsize()

    def poll_passes(self) -> None:
        self.clock.advance(POLL_SECONDS)


def give_up(scheduler: Any) -> None:
    """The scheduler gives its row up, as one stopping does (a scheduler ticked by hand holds its claim
    without the renewals that `end` releases)."""
    with scheduler.store.control_session() as session:
        release_claims(session, [scheduler.claim], "stopped")


def client(service: str, url: str) -> ServiceClient:
    return ServiceClient(service, url, timeout=2.0, retry=FAST_RETRIES)


def add_organisations_everywhere(
    store: Store, katalogus: KatalogusStandin, octopoes: OctopoesStandin, organisations: Sequence[str]
) -> None:
    """The organisations in Baton's database (queues of 1,000) and in both stand-ins."""
    with store.session() as session:
        for org in organisations:
            create_organisation(session, org, org.title(), maxsize=1000)
    for org in organisations:
        katalogus.add_organisation(org)
        octopoes.add_organisation(org)


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    katalogus, octopoes = KatalogusStandin(), OctopoesStandin()
    with StandinServer(katalogus.app) as katalogus_server, StandinServer(octopoes.app) as octopoes_server:
        link = OutsideLinks(
            KatalogusClient(client("katalogus", katalogus_server.url)),
            OctopoesClient(client("octopoes", octopoes_server.url)),
            POLL_SECONDS,
            OutsideServiceRecorder(store, POLL_SECONDS),
        )
        add_organisations_everywhere(store, katalogus, octopoes, ("acme", "beta"))
        yield World(store, katalogus, katalogus_server, octopoes, octopoes_server, link)
        link.katalogus.http.close()
        assert link.octopoes is not None
        link.octopoes.http.close()


def octopoes_mutation(org: str, reference: str, level: int, operation: str = "create") -> dict[str, Any]:
    """A scan-profile mutation as Octopoes publishes it on `scan_profile_mutations`."""
    return {
        "operation": operation,
        "primary_key": reference,
        "value": {
            "primary_key": reference,
            "object_type": reference.split("|")[0],
            "scan_profile": {"scan_profile_type": "declared", "reference": reference, "level": level, "user_id": 3},
        },
        "client_id": org,
    }


def queued(store: Store, queue_id: str) -> list[Task]:
    with store.session() as session:
        return list(queue.list_tasks(session, scheduler_id=queue_id, status=TaskStatus.QUEUED, limit=10_000)[1])


def boefje_pairs(store: Store, queue_id: str = "boefje-acme") -> list[tuple[str, str]]:
    return sorted((task.data["boefje"]["id"], task.data["input_ooi"]) for task in queued(store, queue_id))


def run_until_idle(scheduler: Any, limit: int = 200) -> int:
    """Tick until a tick does nothing; the ticks that did something."""
    for turns in range(limit):
        if scheduler.tick() == 0:
            return turns
    raise AssertionError(f"still busy after {limit} ticks")
