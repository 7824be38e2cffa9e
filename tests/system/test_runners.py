"""Thread and process runners, the director and the stand-alone mode, run for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from baton.control.director import Director
from baton.control.runners import ProcessRunner, ThreadRunner
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType, utcnow
from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import seed_catalogue
from baton.ingest.scheduler import SchedulerContext
from baton.runtime import build_app
from baton.storage.control.organisations import create_organisation, delete_organisation
from baton.storage.engine import Store
from baton.storage.tables import Schedule
from baton.storage.tables import Scheduler as SchedulerRow
from harness.waiting import wait_until

# Seconds allowed for started processes to be running: a Python process importing Baton on a loaded
# machine (the suite runs on several workers) may take tens of seconds. A wait ends when it holds.
PROCESS_START = 120
FAST = {
    "BATON_RETRY_PERIOD_SECONDS": "0.2",
    "BATON_POLL_INTERVAL_SECONDS": "0.1",
    "BATON_RECONCILE_INTERVAL_SECONDS": "0.2",
}


def fast_settings(url: str) -> Settings:
    return Settings(
        database_url=url, retry_period_seconds=0.2, poll_interval_seconds=0.05, reconcile_interval_seconds=0.2
    )


def add_org(store: Store, org: str) -> None:
    with store.session() as session:
        create_organisation(session, org, org, maxsize=100)


def scheduler_row(store: Store, scheduler_id: str) -> SchedulerRow | None:
    with store.session() as session:
        return session.get(SchedulerRow, scheduler_id)


def state_of(store: Store, scheduler_id: str) -> str | None:
    row = scheduler_row(store, scheduler_id)
    return row.state if row else None


def descends_from_us(status: str, depth: int = 4) -> bool:
    """Whether the process whose /proc status this is was started by this process (or its children)."""
    ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
    if ppid == os.getpid():
        return True
    if depth == 0 or ppid <= 1:
        return False
    try:
        return descends_from_us(Path(f"/proc/{ppid}/status").read_text(), depth - 1)
    except OSError:
        return False


def scheduler_processes(organisation: str) -> list[int]:
    """PIDs of live `baton standalone` processes for an organisation started by this test process or
    its children (not another test run's on the same machine), read from /proc. A process forked by
    the fork server shows its command line as one title, words apart by spaces."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").split()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "State:\tZ" in status or not descends_from_us(status):
            continue
        if b"standalone" in argv and organisation.encode() in argv:
            pids.append(int(entry.name))
    return pids


def test_thread_runner_starts_heartbeats_and_stops(store: Store) -> None:
    add_org(store, "acme")
    runner = ThreadRunner(
        SchedulerContext(store=store, settings=fast_settings(store.url), runner="thread", location="t")
    )
    spec = SchedulerSpec("acme", SchedulerType.BOEFJE)
    runner.start(spec)
    runner.start(spec)  # idempotent
    assert runner.list() == [spec]
    assert wait_until(lambda: state_of(store, spec.id) == SchedulerState.RUNNING.value, 10)
    row = scheduler_row(store, spec.id)
    assert row is not None and row.runner == "thread" and row.heartbeat_at is not None
    runner.stop(spec.id)
    assert runner.list() == []
    assert state_of(store, spec.id) == SchedulerState.STOPPED.value


def test_process_runner_restarts_a_killed_child(store: Store) -> None:
    add_org(store, "acme")
    runner = ProcessRunner(store, store.url, extra_env=FAST)
    spec = SchedulerSpec("acme", SchedulerType.NORMALIZER)
    try:
        runner.start(spec)
        first_pid = runner.pid(spec.id)
        assert first_pid is not None
        assert wait_until(lambda: state_of(store, spec.id) == SchedulerState.RUNNING.value, PROCESS_START)
        row = scheduler_row(store, spec.id)
        assert row is not None and row.runner == "process" and row.location is not None
        assert row.location.endswith(f":{first_pid}")

        os.kill(first_pid, signal.SIGKILL)
        assert wait_until(lambda: runner.status(spec.id) == SchedulerState.FAILED, 10)
        assert runner.supervise() == []  # backoff first: it is shown failed until it is back
        assert state_of(store, spec.id) == SchedulerState.FAILED.value
        assert wait_until(lambda: bool(runner.supervise()), 10)
        second_pid = runner.pid(spec.id)
        assert second_pid not in (None, first_pid)
        assert wait_until(lambda: state_of(store, spec.id) == SchedulerState.RUNNING.value, PROCESS_START)
    finally:
        runner.shutdown()
    assert wait_until(lambda: scheduler_processes("acme") == [], 10)
    assert state_of(store, spec.id) == SchedulerState.STOPPED.value


def test_director_reconciles_organisations_idempotently(store: Store) -> None:
    settings = fast_settings(store.url)
    runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="t"))
    director = Director(store, settings, runner)
    try:
        add_org(store, "acme")
        first = director.step()
        assert first is not None and sorted(first.started) == ["boefje-acme", "normalizer-acme", "report-acme"]
        again = director.reconcile()
        assert again.started == [] and again.stopped == []
        add_org(store, "beta")
        assert len(director.reconcile().started) == 3
        assert len(runner.list()) == 6
        with store.session() as session:
            delete_organisation(session, "acme")
        assert sorted(director.reconcile().stopped) == ["boefje-acme", "normalizer-acme", "report-acme"]
        assert {spec.organisation for spec in runner.list()} == {"beta"}
    finally:
        director.stop()
    assert runner.list() == []


def test_director_restarts_a_scheduler_with_a_stale_heartbeat(store: Store) -> None:
    # Leases (and with them heartbeats) are renewed every 30 s and the timeout is 1 s: after its first
    # heartbeat the scheduler goes stale, however long a loaded machine takes to get there.
    settings = Settings(
        database_url=store.url,
        heartbeat_timeout_seconds=1,
        poll_interval_seconds=0.05,
        retry_period_seconds=30,
        renew_deadline_seconds=40,
        lease_seconds=60,
    )
    runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="t"))
    director = Director(store, settings, runner)
    add_org(store, "acme")
    try:
        director.reconcile()
        assert wait_until(lambda: state_of(store, "boefje-acme") == SchedulerState.RUNNING.value, 10)
        time.sleep(1.5)
        assert "boefje-acme" in director.reconcile().restarted
    finally:
        director.stop()


class SlowStartingRunner:
    """Launches nothing: every scheduler is still starting, as a child process on a busy machine is."""

    name = "slow"
    revokes_on_takeover = False

    def __init__(self) -> None:
        self.specs: dict[str, SchedulerSpec] = {}

    def start(self, spec: SchedulerSpec) -> None:
        self.specs.setdefault(spec.id, spec)

    def start_many(self, specs: list[SchedulerSpec]) -> list[str]:
        for spec in specs:
            self.start(spec)
        return [spec.id for spec in specs]

    def follow_leader(self, term: int | None) -> None:
        return None

    def stop(self, scheduler_id: str, timeout: float = 10.0) -> None:
        self.specs.pop(scheduler_id, None)

    def restart(self, scheduler_id: str) -> None:
        return None

    def list(self) -> list[SchedulerSpec]:
        return sorted(self.specs.values())

    def status(self, scheduler_id: str) -> SchedulerState | None:
        return SchedulerState.STARTING if scheduler_id in self.specs else None

    def supervise(self) -> list[str]:
        return []

    def shutdown(self, timeout: float = 10.0) -> None:
        self.specs.clear()


def test_director_waits_for_a_scheduler_it_launched_whatever_an_earlier_heartbeat_says(store: Store) -> None:
    """After a failover the row still holds the dead leader's last heartbeat: the new leader must not
    restart the scheduler it just launched, round after round, before that one could heartbeat."""
    add_org(store, "acme")
    with store.session() as session:
        row = session.get(SchedulerRow, "boefje-acme")
        assert row is not None
        row.state = SchedulerState.RUNNING.value
        row.location = "dead-container:12"
        row.heartbeat_at = utcnow() - timedelta(seconds=60)
    director = Director(store, Settings(database_url=store.url, heartbeat_timeout_seconds=30), SlowStartingRunner())
    assert "boefje-acme" in director.reconcile().started
    assert director.reconcile().restarted == []
    # Launched 50 s ago, after that old heartbeat and longer ago than the timeout: slow, but starting.
    director.launched_at["boefje-acme"] = utcnow() - timedelta(seconds=50)
    assert director.reconcile().restarted == []
    with store.session() as session:  # it heartbeated once since its launch, then went silent: hung
        row = session.get(SchedulerRow, "boefje-acme")
        assert row is not None
        row.heartbeat_at = utcnow() - timedelta(seconds=40)
    assert director.reconcile().restarted == ["boefje-acme"]


def run_cli(*args: str, env_extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, **FAST, **env_extra}
    return subprocess.Popen(
        [sys.executable, "-m", "baton", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def test_standalone_exits_cleanly_on_sigterm(store: Store) -> None:
    add_org(store, "acme")
    process = run_cli(
        "standalone", "--organisation", "acme", "--scheduler", "boefje", env_extra={"BATON_DATABASE_URL": store.url}
    )
    try:
        assert wait_until(lambda: state_of(store, "boefje-acme") == SchedulerState.RUNNING.value, PROCESS_START)
        row = scheduler_row(store, "boefje-acme")
        assert row is not None and row.runner == "standalone" and row.location is not None
        assert row.location.endswith(f":{process.pid}")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output.decode()
    assert state_of(store, "boefje-acme") == SchedulerState.STOPPED.value


@pytest.mark.timeout(400)  # its waits for processes (PROCESS_START) add up on a loaded machine
def test_process_director_restart_adopts_nothing_twice(store: Store) -> None:
    """SIGKILL the director: its children die with it; the next director starts exactly one each
    (on SQLite once the killed one's leases have run out: shorter ones here)."""
    with store.session() as session:
        seed_catalogue(session, None)
    add_org(store, "acme")
    env = {
        "BATON_DATABASE_URL": store.url,
        # Short enough that the killed director's leases run out soon; long enough that a leader on a
        # loaded machine (the suite's other workers starting processes) does not miss its renew
        # deadline and step down, stopping its children (4 s did, once, with six pytest workers).
        "BATON_LEASE_SECONDS": "10",
        "BATON_RENEW_DEADLINE_SECONDS": "8",
        "BATON_RETRY_PERIOD_SECONDS": "1",
    }
    director = run_cli("director", "--runner", "process", env_extra=env)
    try:
        assert wait_until(lambda: len(scheduler_processes("acme")) == 3, PROCESS_START)
        director.kill()
        director.wait()
        assert wait_until(lambda: scheduler_processes("acme") == [], 30), "children outlived their director"
        director = run_cli("director", "--runner", "process", env_extra=env)
        assert wait_until(lambda: len(scheduler_processes("acme")) == 3, PROCESS_START)
        time.sleep(1.0)  # several more reconcile rounds
        assert len(scheduler_processes("acme")) == 3
    finally:
        director.send_signal(signal.SIGTERM)
        director.communicate(timeout=60)
    assert wait_until(lambda: scheduler_processes("acme") == [], 30)


@pytest.mark.timeout(400)  # its waits for processes (PROCESS_START) add up on a loaded machine
@pytest.mark.parametrize("runner", ["thread", "process"])
def test_events_become_tasks_in_six_queues(tmp_path: Path, runner: str) -> None:
    """The issue's acceptance check: two organisations, events in, the right tasks in six queues."""
    url = f"sqlite:///{tmp_path / 'baton.db'}"
    store = Store(url)
    store.migrate()
    with store.session() as session:
        seed_catalogue(session, None)
    settings = fast_settings(url)
    services: list[Director] = []
    director_process = None
    if runner == "thread":
        thread_runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="t"))
        services.append(Director(store, settings, thread_runner))
    else:
        director_process = run_cli("director", "--runner", "process", env_extra={"BATON_DATABASE_URL": url})
    try:
        with TestClient(build_app(settings, store, services=services)) as client:
            for org in ("acme", "beta"):
                assert client.post("/organisations", json={"id": org, "name": org}).status_code == 201
                client.post(
                    f"/organisations/{org}/events",
                    json={
                        "type": "scan_profile_mutation",
                        "object": {
                            "primary_key": "Hostname|internet|a.example",
                            "object_type": "Hostname",
                            "scan_level": 1,
                        },
                    },
                )
                client.post(
                    f"/organisations/{org}/events",
                    json={"type": "raw_file_received", "raw_file": {"id": "r1", "mime_types": ["boefje/dns-records"]}},
                )
                schedule = client.post(f"/organisations/{org}/report-schedules", json={"cron": "* * * * *"}).json()
                with store.session() as session:  # make the schedule due now instead of next minute
                    row = session.get(Schedule, uuid.UUID(schedule["id"]))
                    assert row is not None
                    row.deadline_at = utcnow()

            def six_queues_filled() -> bool:
                return all(queue["size"] == 1 for queue in client.get("/queues").json())

            assert wait_until(six_queues_filled, PROCESS_START), client.get("/queues").json()
            popped = client.post("/queues/boefje-beta/pop").json()
            assert popped["data"]["boefje"]["id"] == "dns-records"

            # A state change is written with the next lease renewal, which a scheduler wakes at once.
            def all_running() -> bool:
                states = {row["id"]: (row["state"], row["runner"]) for row in client.get("/schedulers").json()}
                return all(state == ("running", runner) for state in states.values())

            assert wait_until(all_running, PROCESS_START), client.get("/schedulers").json()
    finally:
        if director_process is not None:
            director_process.send_signal(signal.SIGTERM)
            director_process.communicate(timeout=60)
