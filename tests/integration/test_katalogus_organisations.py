"""Organisations from KATalogus, over real HTTP against the stand-in, on both backends: one KATalogus
creates gets its organisation and schedulers within a poll, one it removes is retired (kept, not
scheduled; test_retired_organisations.py), and only ever those it created; an outage or an empty listing
retires nothing; only the holder of the `katalogus` lease reads and writes, and a listing read by a
holder that lost the lease meanwhile is not applied."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, text
from structlog.testing import capture_logs

from baton.control.leadership import DatabaseLeaseLeader
from baton.control.organisations_from_katalogus import KATALOGUS_LOCK_KEY, KATALOGUS_ROLE, KatalogusOrganisationSync
from baton.core.catalogue import AUTO_SOURCE, KATALOGUS_SOURCE
from baton.core.settings import LeaseSettings, Settings
from baton.ingest.outside_links import OutsideServiceRecorder
from baton.openkat import KatalogusClient
from baton.storage.control.organisations import adopt_organisation, create_organisation
from baton.storage.engine import Store
from baton.storage.scheduling.service_states import outside_services
from baton.storage.tables import Organisation, Scheduler, Task
from harness.standins import KatalogusStandin, StandinServer
from harness.waiting import wait_until
from tests.katalogus_world import client

# Long enough that no lease ends by itself on a loaded machine: the tests end them on purpose.
LEASES = LeaseSettings(lease_seconds=60, renew_deadline_seconds=40, retry_period_seconds=0.1)
ORGANISATIONS_CALL = "GET /v1/organisations"


class Ticker:
    """A monotonic clock the test moves: a poll is due when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def katalogus() -> Iterator[tuple[KatalogusStandin, StandinServer]]:
    standin = KatalogusStandin()
    with StandinServer(standin.app) as server:
        yield standin, server


def make_sync(store: Store, server: StandinServer, holder: str, ticker: Ticker) -> KatalogusOrganisationSync:
    settings = Settings(database_url=store.url, katalogus_poll_seconds=60, queue_maxsize=10)
    leader = DatabaseLeaseLeader(store, holder, LEASES, role=KATALOGUS_ROLE, liveness_key=KATALOGUS_LOCK_KEY)
    recorder = OutsideServiceRecorder(store, 60)
    katalogus = KatalogusClient(client("katalogus", server.url))
    return KatalogusOrganisationSync(store, settings, katalogus, recorder, leader, clock=ticker, holder=holder)


def organisations(store: Store) -> dict[str, tuple[str | None, int]]:
    """The active organisations: id -> (source, how many queues)."""
    with store.session() as session:
        rows = session.execute(
            select(Organisation.id, Organisation.source).where(Organisation.retired_at.is_(None))
        ).all()
        queues = session.scalars(select(Scheduler.organisation)).all()
    return {org_id: (source, list(queues).count(org_id)) for org_id, source in rows}


def retired(store: Store) -> set[str]:
    with store.session() as session:
        return set(session.scalars(select(Organisation.id).where(Organisation.retired_at.is_not(None))))


def test_katalogus_organisations_come_and_go_and_baton_ones_stay(
    store: Store, katalogus: tuple[KatalogusStandin, StandinServer]
) -> None:
    standin, server = katalogus
    with store.session() as session:
        create_organisation(session, "made-in-baton", "Ours", maxsize=10)
        create_organisation(session, "in-both", "Ours too", maxsize=10)
    for org in ("acme", "beta", "in-both"):
        standin.add_organisation(org, org.title())
    ticker = Ticker()
    sync = make_sync(store, server, "a:1", ticker)
    try:
        round_ = sync.step()
        assert round_ is not None and round_.added == ["acme", "beta"]
        assert organisations(store) == {
            "acme": (KATALOGUS_SOURCE, 3),
            "beta": (KATALOGUS_SOURCE, 3),
            "in-both": (None, 3),
            "made-in-baton": (None, 3),
        }
        standin.remove_organisation("beta")
        standin.remove_organisation("in-both")
        standin.add_organisation("gamma")
        assert sync.step() is None  # within the poll: no call
        ticker.now += 60
        round_ = sync.step()
        assert round_ is not None and (round_.added, round_.retired) == (["gamma"], ["beta"])
        assert sorted(organisations(store)) == ["acme", "gamma", "in-both", "made-in-baton"]
        assert retired(store) == {"beta"}
        assert standin.calls[ORGANISATIONS_CALL] == 2
    finally:
        sync.leader.release()


def test_an_organisation_made_because_a_message_named_it_becomes_katalogus_once_listed(
    store: Store, katalogus: tuple[KatalogusStandin, StandinServer]
) -> None:
    """`auto` is the source of an organisation BATON_AUTO_ORGANISATIONS made (a message or a push
    named it); one made through the API stays Baton's."""
    standin, server = katalogus
    with store.session() as session:
        for org in ("named", "named-elsewhere"):
            assert adopt_organisation(session, org, auto=True, maxsize=10)
        create_organisation(session, "made-here", "Made here", maxsize=10)
    standin.add_organisation("named")
    standin.add_organisation("other")
    ticker = Ticker()
    sync = make_sync(store, server, "a:1", ticker)
    try:
        round_ = sync.step()
        assert round_ is not None and (round_.added, round_.adopted) == (["other"], ["named"])
        standin.remove_organisation("named")
        ticker.now += 60
        round_ = sync.step()
        assert round_ is not None and round_.retired == ["named"]
        assert retired(store) == {"named"}
        assert organisations(store) == {
            "named-elsewhere": (AUTO_SOURCE, 3),
            "made-here": (None, 3),
            "other": (KATALOGUS_SOURCE, 3),
        }
    finally:
        sync.leader.release()


@pytest.mark.parametrize("outage", ["refused", "500", "empty"])
def test_an_outage_or_an_empty_listing_retires_nothing(
    store: Store, katalogus: tuple[KatalogusStandin, StandinServer], outage: str
) -> None:
    standin, server = katalogus
    standin.add_organisation("acme")
    ticker = Ticker()
    sync = make_sync(store, server, "a:1", ticker)
    try:
        sync.step()
        assert list(organisations(store)) == ["acme"]
        with capture_logs() as logs:
            for _ in range(3):
                ticker.now += 60
                if outage == "refused":
                    server.down()
                elif outage == "500":
                    standin.faults.status = 500
                else:
                    standin.remove_organisation("acme")
                sync.step()
        assert list(organisations(store)) == ["acme"]
        lines = [(line["log_level"], line["event"]) for line in logs if line["log_level"] != "debug"]
        if outage == "empty":
            assert lines == [("warning", "KATalogus lists no organisation; retiring none")]
        else:
            assert lines == [("warning", "outside service failing")]
            with store.session() as session:
                [state] = outside_services(session)
            assert state.service == "katalogus" and state.down
    finally:
        server.up()
        sync.leader.release()


def test_only_the_lease_holder_reads_katalogus(store: Store, katalogus: tuple[KatalogusStandin, StandinServer]) -> None:
    standin, server = katalogus
    standin.add_organisation("acme")
    ticker = Ticker()
    first, second = make_sync(store, server, "a:1", ticker), make_sync(store, server, "b:2", ticker)
    try:
        assert first.step() is not None
        assert second.step() is None
        assert standin.calls[ORGANISATIONS_CALL] == 1
        first.leader.release()  # it stops: the other takes over at its next round
        ticker.now += 60
        assert second.step() is not None
        assert standin.calls[ORGANISATIONS_CALL] == 2
    finally:
        first.leader.release()
        second.leader.release()


def test_a_listing_read_before_the_lease_was_lost_is_not_applied(
    store: Store, katalogus: tuple[KatalogusStandin, StandinServer]
) -> None:
    """A holder frozen between reading and writing: meanwhile its lease ran out and another retired the
    organisation; the stale listing (which still has it) must not bring it back."""
    standin, server = katalogus
    standin.add_organisation("acme")
    standin.add_organisation("beta")
    ticker = Ticker()
    stale, current = make_sync(store, server, "a:1", ticker), make_sync(store, server, "b:2", ticker)
    try:
        assert stale.step() is not None
        stale_listing = {"acme": "acme", "beta": "beta"}
        with store.session() as session:  # its lease runs out while it is frozen
            session.execute(text("UPDATE leaders SET expires_at = :past"), {"past": "2000-01-01 00:00:00"})
        standin.remove_organisation("beta")
        round_ = current.step()
        assert round_ is not None and round_.retired == ["beta"]
        assert stale.apply(stale_listing) is None  # it resumes: refused
        assert sorted(organisations(store)) == ["acme"] and retired(store) == {"beta"}
    finally:
        stale.leader.release()
        current.leader.release()


def test_a_director_runs_the_schedulers_of_a_katalogus_organisation_within_a_poll(
    store: Store, katalogus: tuple[KatalogusStandin, StandinServer]
) -> None:
    """The services `baton director` (and `baton serve`) run: an organisation added in KATalogus gets
    its running schedulers, its boefje tasks carry KATalogus' image; when KATalogus drops it, it is
    retired (its schedulers stop, its tasks stay), and when KATalogus lists it again its schedulers run
    again."""
    from baton.runtime import RunnerKind, director_services
    from baton.storage.scheduling.inbox import enqueue_event

    standin, server = katalogus
    org = f"org{uuid.uuid4().hex[:8]}"
    standin.add_boefje("dns-records", ["Hostname"], enabled=True, oci_image="ghcr.io/x/dns:2", version="2")
    standin.add_organisation(f"{org}-stays")  # (a listing without any organisation removes none)
    settings = Settings(
        database_url=store.url,
        katalogus_url=server.url,
        katalogus_poll_seconds=0.2,
        openkat_retries=0,
        poll_interval_seconds=0.05,
        retry_period_seconds=0.1,
        reconcile_interval_seconds=0.1,
    )
    services: list[Any] = director_services(store, settings, RunnerKind.thread)
    for service in services:
        service.start_in_background()
    director = services[-1]
    try:
        standin.add_organisation(org)
        running = {f"boefje-{org}", f"normalizer-{org}", f"report-{org}"}
        assert wait_until(lambda: running <= {spec.id for spec in director.runner.list()}, 30)
        with store.session() as session:
            enqueue_event(session, f"boefje-{org}", "scan_profile_mutation", mutation())
        assert wait_until(lambda: boefje_images(store, org) == ["ghcr.io/x/dns:2"], 30)
        standin.remove_organisation(org)
        assert wait_until(lambda: org in retired(store), 30)
        assert wait_until(lambda: not running & {spec.id for spec in director.runner.list()}, 30)
        assert boefje_images(store, org) == ["ghcr.io/x/dns:2"]  # its task stays
        standin.add_organisation(org)
        assert wait_until(lambda: running <= {spec.id for spec in director.runner.list()}, 30)
        assert org not in retired(store)
    finally:
        for service in reversed(services):
            service.stop()


def mutation() -> dict[str, Any]:
    return {
        "type": "scan_profile_mutation",
        "object": {"primary_key": "Hostname|internet|a.example", "object_type": "Hostname", "scan_level": 2},
    }


def boefje_images(store: Store, org: str) -> list[str]:
    with store.session() as session:
        tasks = session.scalars(select(Task).where(Task.organisation == org, Task.type == "boefje")).all()
        return [task.data["boefje"]["oci_image"] for task in tasks]
