"""A boefje task whose scheduler process is SIGKILLed inside its twin check (KATalogus answered, Octopoes'
`GET /object-clients` held by its stand-in): the check was written to the database with the task
(storage/queues/twin_checks.py), so the next process for the organisation makes the twin, exactly once,
with the original's id as its deduplication_key. Real `baton standalone` processes against the KATalogus
and Octopoes stand-ins over HTTP, the event put in the scheduler's inbox as the API puts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, select

from baton.core.model import SchedulerState
from baton.storage.engine import Store
from baton.storage.scheduling.inbox import enqueue_event
from baton.storage.tables import Scheduler, TwinCheck
from harness.standins import KatalogusStandin, OctopoesStandin, StandinServer
from harness.waiting import wait_until
from tests.katalogus_world import add_organisations_everywhere, octopoes_mutation, queued

CLIENTS_CALL = "GET /object-clients"
SHARED = "Hostname|internet|shared.example"
PROCESS_START = 60  # a Python process importing Baton on a loaded machine; a wait ends when it holds
LEASES = {  # a killed process's claim runs out soon; a live one renews well within its deadline
    "BATON_LEASE_SECONDS": "4",
    "BATON_RENEW_DEADLINE_SECONDS": "3",
    "BATON_RETRY_PERIOD_SECONDS": "0.3",
}


def estate(store: Store, katalogus: KatalogusStandin, octopoes: OctopoesStandin) -> None:
    """acme and beta, with the same settings of dns-records (scan level 2) in KATalogus; beta holds the
    object at level 3 (a twin). acme's own node holds nothing: no backfill makes a task of its own, the
    event does."""
    katalogus.add_boefje("dns-records", ["Hostname"], scan_level=2, oci_image="ghcr.io/x/dns:1")
    add_organisations_everywhere(store, katalogus, octopoes, ("acme", "beta"))
    for org in ("acme", "beta"):
        katalogus.set_enabled(org, "dns-records", True)
        katalogus.set_settings(org, "dns-records", {"API_KEY": "same"})
    octopoes.add_object("beta", SHARED, level=3)


def boefje_scheduler(store: Store, katalogus: str, octopoes: str, log: Path) -> subprocess.Popen[bytes]:
    environment = {
        "BATON_DATABASE_URL": store.url,
        "BATON_KATALOGUS_URL": katalogus,
        "BATON_OCTOPOES_URL": octopoes,
        "BATON_POLL_INTERVAL_SECONDS": "0.1",
        "BATON_OPENKAT_TIMEOUT_SECONDS": "120",  # the held call neither times out nor is retried
        "BATON_LOG_LEVEL": "info",
        **LEASES,
    }
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "baton", "standalone", "--organisation", "acme", "--scheduler", "boefje"],
            env={**os.environ, **environment},
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def twin_checks(store: Store) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(TwinCheck)) or 0


def running(store: Store, pid: int) -> bool:
    with store.session() as session:
        row = session.get(Scheduler, "boefje-acme")
        return row is not None and row.state == SchedulerState.RUNNING.value and str(row.location).endswith(f":{pid}")


def test_a_twin_check_survives_its_process_killed_inside_it(store: Store, tmp_path: Path) -> None:
    katalogus, octopoes = KatalogusStandin(), OctopoesStandin()
    estate(store, katalogus, octopoes)
    log = tmp_path / "schedulers.log"
    with StandinServer(katalogus.app) as katalogus_server, StandinServer(octopoes.app) as octopoes_server:
        octopoes.holds.hold(CLIENTS_CALL)
        first = boefje_scheduler(store, katalogus_server.url, octopoes_server.url, log)
        try:
            assert wait_until(lambda: running(store, first.pid), PROCESS_START), log.read_text()
            with store.session() as session:
                enqueue_event(session, "boefje-acme", "scan_profile_mutation", octopoes_mutation("acme", SHARED, 2))
            # Inside the twin step: the task and its check committed, the process waiting on Octopoes.
            assert wait_until(lambda: octopoes.holds.waiting(CLIENTS_CALL) == 1, 30), log.read_text()
            [original] = queued(store, "boefje-acme")
            assert twin_checks(store) == 1
            first.send_signal(signal.SIGKILL)
            assert first.wait(10) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(10)
            octopoes.holds.release()
        assert queued(store, "boefje-beta") == [] and twin_checks(store) == 1  # nothing done past the check

        second = boefje_scheduler(store, katalogus_server.url, octopoes_server.url, log)
        try:  # once the killed process's claim has run out (LEASES)
            made = wait_until(lambda: twin_checks(store) == 0 and len(queued(store, "boefje-beta")) == 1, 60)
            assert made, log.read_text()
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
    [twin] = queued(store, "boefje-beta")
    assert twin.data["deduplication_key"] == str(original.id) and twin.data["input_ooi"] == SHARED
    assert twin.data["organization"] == "beta"
    [original] = queued(store, "boefje-acme")
    assert original.data["deduplication_key"] == str(original.id)
    assert octopoes.calls[CLIENTS_CALL] == 2  # the killed process's call, and the next one's
