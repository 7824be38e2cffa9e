"""Chaos at any scale: K API replicas and 2 directors as real processes on one PostgreSQL database,
M job-runner clients popping and completing tasks while events flow in, and SIGKILLs at random
moments (an API replica, the leading director, a scheduler process). Afterwards: did every event
become exactly one task, was any task held by two clients at once, was any lost, did all complete;
and how long did director failover take. The test suite runs it small (tests/system), the benchmark
(`python -m bench.replication`) runs it large and writes the report.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

from baton.core.recovery import REPLACED_PREFIX
from baton.ingest.catalogue.plugins_file import PluginSpec
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.scheduling.plugins import seed_plugins
from baton.storage.urls import libpq_conninfo
from harness.servers import start_api_replica, stop_processes, wait_ready
from harness.waiting import free_port

OBJECT_TYPE = "ReplicaObject"
BOEFJE_ID = "replica-boefje"
FAST_ENV = {
    "BATON_RECONCILE_INTERVAL_SECONDS": "0.5",
    "BATON_RETRY_PERIOD_SECONDS": "1",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": "10",
    "BATON_POLL_INTERVAL_SECONDS": "0.2",
    # A pop whose answer died with a killed API replica leaves its task `dispatched` with nobody
    # working on it: recovery hands it out again (as a new task) after this long.
    "BATON_TASK_TIMEOUT_SECONDS": "5",
    "BATON_TASK_MAX_ATTEMPTS": "5",
    "BATON_LOG_LEVEL": "info",
    "BATON_AUTH": "off",
}


class Cluster:
    """The processes under test; each can be killed and brought back like Kubernetes would."""

    def __init__(self, database_url: str, api_replicas: int, directors: int) -> None:
        self.log_dir = Path(tempfile.mkdtemp(prefix="baton-replication-"))
        self._logs = 0
        self.database_url = database_url
        self.env = {**os.environ, **FAST_ENV, "BATON_DATABASE_URL": database_url}
        self.api: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.directors: list[subprocess.Popen[bytes]] = []
        for _ in range(api_replicas):
            self.api.append(self._start_api(free_port()))
        for _ in range(directors):
            self.directors.append(self._start_director())

    def _start_api(self, port: int) -> tuple[str, subprocess.Popen[bytes]]:
        return f"http://127.0.0.1:{port}", start_api_replica(self.env, port, self._log("api"))

    def _log(self, kind: str) -> Any:
        """Each process logs to a file of its own under `log_dir` (schedulers share their director's)."""
        self._logs += 1
        return (self.log_dir / f"{self._logs:02d}-{kind}.log").open("wb")

    def _start_director(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "baton", "director", "--runner", "process"],
            env=self.env,
            stdout=self._log("director"),
            stderr=subprocess.STDOUT,
        )

    @property
    def urls(self) -> list[str]:
        return [url for url, _ in self.api]

    def wait_ready(self, timeout: float = 90) -> None:
        wait_ready(self.urls, timeout)

    def kill_api(self, index: int, restart_after: float = 1.0) -> None:
        url, process = self.api[index]
        process.kill()
        process.wait()
        time.sleep(restart_after)
        self.api[index] = self._start_api(int(url.rsplit(":", 1)[1]))

    def leader_pid(self) -> int | None:
        with psycopg.connect(libpq_conninfo(self.database_url), autocommit=True) as conn:
            row = conn.execute("SELECT holder FROM leaders WHERE role = 'director'").fetchone()
        if row is None:
            return None
        pid = int(str(row[0]).rsplit(":", 1)[1])
        return pid if any(director.pid == pid and director.poll() is None for director in self.directors) else None

    def kill_leader(self) -> float:
        """SIGKILL the leading director, restart it as a standby; return seconds until a new leader renewed."""
        pid = self.leader_pid()
        if pid is None:
            raise RuntimeError("no live leader to kill")
        killed_at = datetime.now(UTC)
        started = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        index = next(i for i, director in enumerate(self.directors) if director.pid == pid)
        self.directors[index].wait()
        self.directors[index] = self._start_director()
        while time.monotonic() - started < 120:
            with psycopg.connect(libpq_conninfo(self.database_url), autocommit=True) as conn:
                row = conn.execute("SELECT holder, acquired_at FROM leaders WHERE role = 'director'").fetchone()
            if row is not None and not str(row[0]).endswith(f":{pid}") and row[1] > killed_at:
                return time.monotonic() - started
            time.sleep(0.05)
        raise RuntimeError("no director took over within 120 s")

    def kill_scheduler(self, scheduler_id: str) -> int:
        with psycopg.connect(libpq_conninfo(self.database_url), autocommit=True) as conn:
            row = conn.execute("SELECT location FROM schedulers WHERE id = %s", (scheduler_id,)).fetchone()
        if row is None or row[0] is None:
            raise RuntimeError(f"{scheduler_id} has no location yet")
        pid = int(str(row[0]).rsplit(":", 1)[1])
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        stop_processes([*self.directors, *(process for _, process in self.api)])


@dataclass
class Ledger:
    """What the clients saw: every pop and completion, to check exclusivity afterwards."""

    holds: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    completed: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(self, task_id: str, start: float, end: float) -> None:
        with self.lock:
            self.holds[task_id].append((start, end))
            self.completed += 1


class JobRunner(threading.Thread):
    """A job-runner client: pop from any replica, run, mark completed; survives replica deaths."""

    def __init__(self, cluster: Cluster, ledger: Ledger, stop: threading.Event, index: int, batch: int = 1) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.ledger = ledger
        self.stop_event = stop
        self.index = index
        self.batch = batch
        self.clients: dict[str, httpx.Client] = {}

    def _client(self, url: str) -> httpx.Client:
        """One keep-alive client per replica URL (a new connection per request would make the
        load generator, not Baton, the bottleneck)."""
        if url not in self.clients:
            self.clients[url] = httpx.Client(base_url=url, timeout=10)
        return self.clients[url]

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        urls = self.cluster.urls
        for attempt in range(len(urls) * 3):
            url = urls[(self.index + attempt) % len(urls)]
            try:
                response = self._client(url).request(method, path, **kwargs)
            except httpx.HTTPError:
                with self.ledger.lock:
                    self.ledger.errors += 1
                time.sleep(0.1)
                continue
            if response.status_code >= 500:
                time.sleep(0.1)
                continue
            return response
        return None

    def run(self) -> None:
        while not self.stop_event.is_set():
            response = self._call("POST", "/schedulers/boefje/pop", params={"limit": self.batch})
            tasks = response.json()["results"] if response is not None and response.status_code == 200 else []
            if not tasks:
                time.sleep(0.05)
                continue
            for task in tasks:
                start = time.monotonic()
                self._call("PATCH", f"/tasks/{task['id']}", json={"status": "running"})
                finished = self._call("PATCH", f"/tasks/{task['id']}", json={"status": "completed"})
                if finished is not None and (finished.status_code == 200 or self._completed(task["id"])):
                    self.ledger.hold(task["id"], start, time.monotonic())

    def _completed(self, task_id: str) -> bool:
        """After a 409 (e.g. the first PATCH's answer died with its replica): did it complete?"""
        response = self._call("GET", f"/tasks/{task_id}")
        return response is not None and response.status_code == 200 and response.json()["status"] == "completed"


class EventFeeder(threading.Thread):
    def __init__(self, cluster: Cluster, organisations: list[str], events: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.organisations = organisations
        self.events = events
        self.rate = rate
        self.sent: dict[str, set[str]] = defaultdict(set)

    def run(self) -> None:
        for n in range(self.events):
            org = self.organisations[n % len(self.organisations)]
            key = f"{OBJECT_TYPE}|obj-{n}"
            body = {
                "type": "scan_profile_mutation",
                "object": {"primary_key": key, "object_type": OBJECT_TYPE, "scan_level": 1},
            }
            for attempt in range(100):
                url = self.cluster.urls[(n + attempt) % len(self.cluster.urls)]
                with suppress(httpx.HTTPError):
                    if httpx.post(f"{url}/organisations/{org}/events", json=body, timeout=10).status_code == 202:
                        self.sent[org].add(key)
                        break
                time.sleep(0.1)
            time.sleep(1 / self.rate)


def prepare(database_url: str, organisations: list[str]) -> None:
    """Fresh schema content: the organisations and one boefje that matches every event once."""
    store = Store(database_url)
    store.migrate()
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        conn.execute("TRUNCATE organisations, tasks, events, boefje_runs, leaders, plugins, queue_counters CASCADE")
    with store.session() as session:
        plugin = PluginSpec(id=BOEFJE_ID, type="boefje", name="Replica boefje", consumes=[OBJECT_TYPE], scan_level=0)
        seed_plugins(session, [plugin.model_dump()])
        for org in organisations:
            create_organisation(session, org, org, maxsize=0)
    store.dispose()


@contextmanager
def running_cluster(database_url: str, api_replicas: int, directors: int) -> Iterator[Cluster]:
    cluster = Cluster(database_url, api_replicas, directors)
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return bool(condition())


def task_summary(database_url: str) -> dict[str, Any]:
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        statuses: dict[str, int] = dict(conn.execute("SELECT status, count(*) FROM tasks GROUP BY status").fetchall())
        # A task recovery handed out again under a new id is one task with its replacement, not two.
        per_object = conn.execute(
            "SELECT organisation, data->>'input_ooi', count(*) FROM tasks"
            " WHERE NOT coalesce(reason LIKE %s, false) GROUP BY 1, 2",
            (f"{REPLACED_PREFIX}%",),
        ).fetchall()
        attempts = conn.execute("SELECT coalesce(sum(attempts), 0) FROM tasks").fetchone()
    return {"statuses": statuses, "per_object": per_object, "recovered": int(attempts[0]) if attempts else 0}


def run_chaos(
    database_url: str,
    *,
    api_replicas: int = 2,
    clients: int = 4,
    events: int = 200,
    organisations: int = 2,
    kills: tuple[str, ...] = ("api", "leader", "scheduler"),
    seed: int = 7,
) -> dict[str, Any]:
    """Events flow and clients work while processes are SIGKILLed; then check the invariants."""
    rng = random.Random(seed)
    orgs = [f"org{n}" for n in range(organisations)]
    prepare(database_url, orgs)
    ledger = Ledger()
    stop = threading.Event()
    report: dict[str, Any] = {"api_replicas": api_replicas, "clients": clients, "events": events, "kills": []}
    with running_cluster(database_url, api_replicas, 2) as cluster:
        report["logs"] = str(cluster.log_dir)
        if not wait_for(lambda: cluster.leader_pid() is not None, 60):
            raise RuntimeError("no director became leader")
        feeder = EventFeeder(cluster, orgs, events, rate=max(20.0, events / 15))
        runners = [JobRunner(cluster, ledger, stop, index) for index in range(clients)]
        feeder.start()
        for runner in runners:
            runner.start()
        for kill in kills:
            time.sleep(rng.uniform(1.0, 3.0))
            if kill == "api":
                cluster.kill_api(rng.randrange(len(cluster.api)))
                report["kills"].append("API replica")
            elif kill == "leader":
                report["failover_seconds"] = cluster.kill_leader()
                report["kills"].append("leading director")
            elif kill == "scheduler":
                victim = f"boefje-{rng.choice(orgs)}"
                if wait_for(lambda v=victim: _has_location(database_url, v), 30):
                    cluster.kill_scheduler(victim)
                    report["kills"].append(f"scheduler {victim}")
        feeder.join(300)
        expected = sum(len(keys) for keys in feeder.sent.values())

        def all_done() -> bool:
            summary = task_summary(database_url)
            return summary["statuses"].get("completed", 0) >= expected and not any(
                summary["statuses"].get(s, 0) for s in ("queued", "dispatched", "running")
            )

        report["all_completed"] = wait_for(all_done, 180)
        stop.set()
        for runner in runners:
            runner.join(30)
    summary = task_summary(database_url)
    created = {(org, key) for org, key, _ in summary["per_object"]}
    sent = {(org, key) for org, keys in feeder.sent.items() for key in keys}
    overlaps = 0
    for holds in ledger.holds.values():
        ordered = sorted(holds)
        overlaps += sum(1 for a, b in itertools.pairwise(ordered) if b[0] < a[1])
    report.update(
        {
            "events_sent": len(sent),
            "tasks": sum(count for _, _, count in summary["per_object"]),
            "duplicated_events": sum(1 for _, _, count in summary["per_object"] if count > 1),
            "missing_events": len(sent - created),
            "unexpected_tasks": len(created - sent),
            "statuses": summary["statuses"],
            "recovered": summary["recovered"],
            "handed_out_twice_at_once": overlaps,
            "handed_out_again_after_recovery": sum(1 for holds in ledger.holds.values() if len(holds) > 1),
            "client_connection_errors": ledger.errors,
        }
    )
    return report


def _has_location(database_url: str, scheduler_id: str) -> bool:
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        row = conn.execute("SELECT location, state FROM schedulers WHERE id = %s", (scheduler_id,)).fetchone()
    return row is not None and row[0] is not None and row[1] == "running"


def run_throughput(database_url: str, api_replicas: int, clients: int, tasks: int, batch: int) -> float:
    """Tasks completed per second by `clients` job runners through `api_replicas` replicas."""
    orgs = ["org0"]
    prepare(database_url, orgs)
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, data, attempts, created_at,"
            " modified_at) SELECT gen_random_uuid(), 'boefje-org0', 'org0', 'boefje', 1, 'queued',"
            " jsonb_build_object('n', n), 0, now(), now() FROM generate_series(1, %s) AS n",
            (tasks,),
        )
    ledger = Ledger()
    stop = threading.Event()
    with running_cluster(database_url, api_replicas, 1) as cluster:
        runners = [JobRunner(cluster, ledger, stop, index, batch=batch) for index in range(clients)]
        started = time.monotonic()
        for runner in runners:
            runner.start()
        wait_for(lambda: ledger.completed >= tasks, 600)
        elapsed = time.monotonic() - started
        stop.set()
        for runner in runners:
            runner.join(30)
    return ledger.completed / elapsed
