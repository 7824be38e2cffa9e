"""The replication experiment in real containers (Podman + podman-compose; `bash bench/containers.sh`).

Scenario "split": deploy/docker-compose.yml as it is (with the local-images override): 3 API replicas
(`baton serve --no-director`), 2 directors (`baton director --runner process`, schedulers are child
processes inside the leading director's container), 1 PostgreSQL, 1 RabbitMQ. Job-runner clients run
on the host and pop through the replicas' published ports on 127.0.0.1 (pop, then PATCH completed);
organisations and scan-profile mutations are published to RabbitMQ. While events flow, in turn:
`podman kill` an API replica (started again after a few seconds, as an orchestrator would), the
leading director's container (found through the `leaders` table), one scheduler process inside the
leader's container (`kill -9`), then `podman restart` PostgreSQL and RabbitMQ once each.

Scenario "embedded": what the question asks literally, a container whose process holds its
schedulers in memory (`baton serve`: API + director + thread-runner schedulers in one process)
replicated twice on one PostgreSQL; the leading replica is killed mid-run.

Counted from what the clients saw and what the database holds: events in (confirmed publishes),
tasks created, duplicated (one hash or one event twice), missing (an event without a task), handed
out twice (every pop of every client is recorded), completed; failover and recovery times; what each
kill or restart cost (client errors, the longest time without a successful pop, event-to-task delay).

    python -m bench.containers [--quick] [--output docs/replication-containers.md] [--keep]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE_FILES = [DEPLOY / "docker-compose.yml", DEPLOY / "docker-compose.local.yml"]
PROJECT = "baton-bench"
OBJECT_TYPE = "ReplicaObject"
BOEFJE_ID = "replica-boefje"
# Faster rounds than production so that failover and recovery fit a short run. A pop whose answer is
# lost with a killed replica leaves its task `dispatched`: recovery re-queues it after the timeout.
FAST_ENV = {
    "BATON_RECONCILE_INTERVAL_SECONDS": "1",
    "BATON_HEARTBEAT_INTERVAL_SECONDS": "1",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": "15",
    "BATON_POLL_INTERVAL_SECONDS": "0.5",
    "BATON_TASK_TIMEOUT_SECONDS": "20",
    "BATON_TASK_MAX_ATTEMPTS": "5",
    "BATON_LOG_JSON": "true",
}


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def published(container: str, port: int) -> str:
    """`127.0.0.1:NNNN` where the container's port is published (compose asks for a free port)."""
    for line in podman("port", container, str(port)).splitlines():
        if line.strip():
            return line.strip()
    raise RuntimeError(f"{container} publishes no port {port}")


class Stack:
    """One podman-compose project: the compose files, an override for this run, and its containers."""

    def __init__(self, name: str, override: dict[str, Any], log_dir: Path) -> None:
        self.name = name
        self.log_dir = log_dir
        override_file = log_dir / f"{name}.override.yml"
        override_file.write_text(yaml.safe_dump(override, sort_keys=False))
        self.files = [*COMPOSE_FILES, override_file]
        self.database_url = ""
        self.amqp_url = ""
        self.token = ""
        self.api: dict[str, str] = {}  # container -> base URL

    def compose(self, *args: str, timeout: float = 600) -> None:
        command = ["podman-compose", "-p", PROJECT]
        for path in self.files:
            command += ["-f", str(path)]
        with (self.log_dir / "podman-compose.log").open("a") as out:
            out.write(f"\n$ {' '.join(command + list(args))}\n")
            out.flush()
            subprocess.run([*command, *args], stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)

    def container(self, service: str, number: int) -> str:
        return f"{PROJECT}_{service}_{number}"

    def containers(self, service: str) -> list[str]:
        names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"label=io.podman.compose.project={PROJECT}")
        return sorted(n for n in names.split() if re.fullmatch(rf"{re.escape(PROJECT)}_{service}_\d+", n))

    def up(self, api_service: str) -> None:
        self.down()
        self.compose("up", "-d", "--no-build", "postgres", "rabbitmq")
        self.database_url = f"postgresql://baton:baton@{published(self.container('postgres', 1), 5432)}/baton"
        self.amqp_url = f"amqp://baton:baton@{published(self.container('rabbitmq', 1), 5672)}/%2F"
        wait_for(self._postgres_up, 120, "PostgreSQL did not start")
        wait_for(self._rabbitmq_up, 180, "RabbitMQ did not start")
        self.compose("up", "-d", "--no-build")
        for name in self.containers(api_service):
            self.api[name] = "http://" + published(name, 8000)
        for name, url in self.api.items():
            wait_for(lambda url=url: _answers(f"{url}/health"), 180, f"{name} did not answer /health")

    def _postgres_up(self) -> bool:
        with suppress(psycopg.Error), psycopg.connect(self.database_url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
            return True
        return False

    def _rabbitmq_up(self) -> bool:
        import pika

        with suppress(Exception):
            pika.BlockingConnection(pika.URLParameters(self.amqp_url)).close()
            return True
        return False

    def down(self) -> None:
        self.compose("down", "-v", "-t", "5")

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, connect_timeout=5, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def create_token(self, container: str) -> str:
        """What an operator does: `... exec api baton token create --name NAME --scope admin`."""
        output = podman(
            "exec", container, "baton", "token", "create", "--name", f"bench-{time.time_ns()}", "--scope", "admin"
        )
        [token] = [line.strip() for line in output.splitlines() if line.startswith("baton_")]
        return token

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=next(iter(self.api.values())), headers=self.headers, timeout=10)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def hostnames(self, service: str) -> dict[str, str]:
        """Container hostname (what `leaders.holder` and `schedulers.location` carry) -> container."""
        return {
            podman("inspect", "--format", "{{.Config.Hostname}}", name).strip(): name
            for name in self.containers(service)
        }

    def leader(self) -> tuple[str, datetime] | None:
        rows = self.query("SELECT holder, acquired_at FROM leaders WHERE role = 'director'")
        return (str(rows[0][0]), rows[0][1]) if rows else None

    def start(self, container: str) -> None:
        podman("start", container)
        if container in self.api:
            # The published port is chosen again when the container starts.
            self.api[container] = "http://" + published(container, 8000)

    def save_logs(self) -> None:
        for name in self.containers("[a-z]+"):
            with (self.log_dir / f"{name}.log").open("w") as out:
                subprocess.run(["podman", "logs", name], stdout=out, stderr=subprocess.STDOUT, check=False)


def _answers(url: str, status: int = 200) -> bool:
    with suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2).status_code == status
    return False


def wait_for(condition: Callable[[], bool], timeout: float, error: str | None = None, interval: float = 0.1) -> float:
    """Seconds until `condition()` held; raises `error` (or returns inf) after `timeout`."""
    started = time.time()
    while time.time() - started < timeout:
        if condition():
            return time.time() - started
        time.sleep(interval)
    if error:
        raise RuntimeError(error)
    return float("inf")


@dataclass
class Ledger:
    """Everything the clients and the publisher saw, with wall-clock times (containers share the clock)."""

    pops: list[tuple[float, int, str]] = field(default_factory=list)  # (time, client, task id)
    completed: set[str] = field(default_factory=set)
    holds: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    pop_ok: list[float] = field(default_factory=list)  # every pop request answered 200
    errors: list[tuple[float, str]] = field(default_factory=list)  # connection errors and 5xx
    published: dict[tuple[str, str], float] = field(default_factory=dict)  # (org, object) -> confirmed at
    publish_seconds: list[tuple[float, float]] = field(default_factory=list)  # (started, seconds)
    lock: threading.Lock = field(default_factory=threading.Lock)


class JobRunner(threading.Thread):
    """A job runner outside the containers: pop one task (OpenKAT's cross-organisation pop), PATCH it
    completed; on a dead replica or a 5xx it tries the next replica."""

    def __init__(self, stack: Stack, ledger: Ledger, stop: threading.Event, index: int) -> None:
        super().__init__(daemon=True, name=f"client-{index}")
        self.stack = stack
        self.ledger = ledger
        self.stop_event = stop
        self.index = index
        self.clients: dict[str, httpx.Client] = {}

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        for attempt in itertools.count():
            if self.stop_event.is_set() and attempt > 0:
                return None
            urls = sorted(self.stack.api.values())
            url = urls[(self.index + attempt) % len(urls)]
            client = self.clients.get(url)
            if client is None:
                client = self.clients[url] = httpx.Client(base_url=url, headers=self.stack.headers, timeout=10)
            try:
                response = client.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                self._error(f"{url} {type(exc).__name__}")
                time.sleep(0.2)
                continue
            if response.status_code >= 500:
                self._error(f"{url} {response.status_code}")
                time.sleep(0.2)
                continue
            return response
        return None

    def _error(self, what: str) -> None:
        with self.ledger.lock:
            self.ledger.errors.append((time.time(), what))

    def run(self) -> None:
        while not self.stop_event.is_set():
            response = self._call("POST", "/schedulers/boefje/pop", params={"limit": 1})
            if response is None:
                continue
            now = time.time()
            if response.status_code != 200:
                self._error(f"pop answered {response.status_code}")
                time.sleep(0.2)
                continue
            tasks = response.json()["results"]
            with self.ledger.lock:
                self.ledger.pop_ok.append(now)
                self.ledger.pops.extend((now, self.index, task["id"]) for task in tasks)
            if not tasks:
                time.sleep(0.2)
                continue
            for task in tasks:
                done = self._call("PATCH", f"/tasks/{task['id']}", json={"status": "completed"})
                if done is not None and (done.status_code == 200 or self._is_completed(task["id"])):
                    with self.ledger.lock:
                        self.ledger.completed.add(task["id"])
                        self.ledger.holds[task["id"]].append((now, time.time()))

    def _is_completed(self, task_id: str) -> bool:
        """After a 409 (the PATCH's first answer was lost with its replica): did it complete?"""
        response = self._call("GET", f"/tasks/{task_id}")
        return response is not None and response.status_code == 200 and response.json()["status"] == "completed"


class AmqpPublisher:
    """Confirmed, persistent publishing in the wire format Baton documents (README, "RabbitMQ"):
    durable queues, JSON bodies. Reconnects and retries through a broker restart (0.5 s doubling to
    5 s); a publish that returned was confirmed by the broker. Deliberately not Baton's own module:
    the harness drives the containers from outside, like any other publisher."""

    def __init__(self, url: str, attempts: int = 60) -> None:
        self.url = url
        self.attempts = attempts
        self.connection: Any = None
        self.channel: Any = None
        self.declared: set[str] = set()

    def publish(self, queue: str, payload: dict[str, Any]) -> None:
        import pika

        delay = 0.5
        for attempt in range(self.attempts):
            try:
                if self.channel is None or not self.channel.is_open:
                    self.close()
                    self.connection = pika.BlockingConnection(pika.URLParameters(self.url))
                    self.channel = self.connection.channel()
                    self.channel.confirm_delivery()
                    self.declared.clear()
                if queue not in self.declared:
                    self.channel.queue_declare(queue=queue, durable=True)
                    self.declared.add(queue)
                self.channel.basic_publish(
                    exchange="",
                    routing_key=queue,
                    body=json.dumps(payload).encode(),
                    properties=pika.BasicProperties(delivery_mode=2, content_type="application/json"),
                    mandatory=True,
                )
                return
            except (pika.exceptions.AMQPError, OSError, ValueError):
                self.channel = None
                if attempt == self.attempts - 1:
                    raise
                time.sleep(delay)
                delay = min(5.0, delay * 2)

    def close(self) -> None:
        with suppress(Exception):
            if self.connection is not None and self.connection.is_open:
                self.connection.close()
        self.connection = self.channel = None


class EventPublisher(threading.Thread):
    """Publishes one scan-profile mutation per object to `{org}__scan_profile_mutations`, confirmed
    and persistent; records when each was
    confirmed and how long each publish took (it retries through a broker restart). Runs at `rate`
    until stopped, so events flow through every kill and restart."""

    def __init__(self, stack: Stack, ledger: Ledger, organisations: list[str], rate: float) -> None:
        super().__init__(daemon=True, name="publisher")
        self.stack = stack
        self.ledger = ledger
        self.organisations = organisations
        self.rate = rate
        self.failed = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        publisher = AmqpPublisher(self.stack.amqp_url)
        for n in itertools.count():
            if self.stop_event.is_set():
                break
            org = self.organisations[n % len(self.organisations)]
            key = f"{OBJECT_TYPE}|obj-{n}"
            body = {
                "type": "scan_profile_mutation",
                "operation": "create",
                "object": {"primary_key": key, "object_type": OBJECT_TYPE, "scan_level": 1},
            }
            started = time.time()
            try:
                publisher.publish(f"{org}__scan_profile_mutations", body)
            except Exception as exc:  # gave up after its retries: not counted as an event in
                self.failed += 1
                log(f"publish of {key} failed: {exc!r}")
                continue
            confirmed = time.time()
            with self.ledger.lock:
                self.ledger.published[(org, key)] = confirmed
                self.ledger.publish_seconds.append((started, confirmed - started))
            time.sleep(max(0.0, 1 / self.rate - (confirmed - started)))
        publisher.close()


def prepare(stack: Stack, organisations: list[str], schedulers_per_org: int) -> float:
    """A token, a boefje that turns each event into exactly one task, organisations announced over
    RabbitMQ; returns seconds until every scheduler ran."""
    stack.token = stack.create_token(next(iter(stack.api)))
    with stack.http() as http:
        plugin = {
            "id": BOEFJE_ID,
            "type": "boefje",
            "name": "Replica boefje",
            "consumes": [OBJECT_TYPE],
            "scan_level": 0,
        }
        answer = http.post("/plugins", json=plugin)
        if answer.status_code not in (201, 409):
            raise RuntimeError(f"POST /plugins answered {answer.status_code}: {answer.text}")
    started = time.time()
    publisher = AmqpPublisher(stack.amqp_url)
    for org in organisations:
        publisher.publish(
            "baton.organisations", {"type": "organisation.created", "organisation": {"id": org, "name": org}}
        )
    publisher.close()

    def all_running() -> bool:
        rows = stack.query("SELECT count(*) FROM schedulers WHERE state = 'running'")
        return bool(rows[0][0] >= len(organisations) * schedulers_per_org)

    wait_for(all_running, 180, "the schedulers did not all start")
    return time.time() - started


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch inside [start, end] without a successful pop answer."""
    inside = sorted(t for t in times if start <= t <= end)
    points = [start, *inside, end]
    return max((b - a for a, b in itertools.pairwise(points)), default=end - start)


@dataclass
class Action:
    what: str
    at: float
    recovery: str = ""
    detail: str = ""
    window_end: float = 0.0


class Chaos:
    """The kills and restarts, each with its own recovery measure."""

    def __init__(self, stack: Stack, ledger: Ledger, organisations: list[str]) -> None:
        self.stack = stack
        self.ledger = ledger
        self.organisations = organisations
        self.actions: list[Action] = []
        self.failover_seconds: list[float] = []

    def kill_api(self, container: str, down_for: float = 3.0) -> None:
        action = Action(f"`podman kill` API replica {container.rsplit('_', 1)[1]}", time.time())
        podman("kill", container)
        time.sleep(down_for)
        self.stack.start(container)
        wait_for(lambda: _answers(f"{self.stack.api[container]}/health"), 120)
        action.recovery = (
            f"down {down_for:.0f} s, then `podman start`: serving again {time.time() - action.at:.1f} s after the kill"
        )
        self.actions.append(action)

    def kill_leader(self, service: str, down_for: float = 3.0) -> None:
        leader = self.stack.leader()
        if leader is None:
            raise RuntimeError("no leader to kill")
        holder = leader[0]
        hosts = self.stack.hostnames(service)
        container = hosts[holder.rsplit(":", 1)[0]]
        action = Action(f"`podman kill` the leading director ({container.rsplit('_', 1)[1]})", time.time())
        podman("kill", container)

        def new_leader() -> bool:
            current = self.stack.leader()
            return current is not None and current[0] != holder and current[1].timestamp() > action.at

        failover = wait_for(new_leader, 120, "no director took over within 120 s", interval=0.05)
        self.failover_seconds.append(failover)
        new_host = self.stack.leader()[0].rsplit(":", 1)[0]  # type: ignore[index]
        expected = len(self.stack.query("SELECT id FROM schedulers"))

        def schedulers_moved() -> bool:
            rows = self.stack.query(
                "SELECT count(*) FROM schedulers WHERE state = 'running' AND split_part(location, ':', 1) = %s"
                " AND heartbeat_at > to_timestamp(%s)",
                new_host,
                action.at,
            )
            return bool(rows[0][0] >= expected)

        moved = wait_for(schedulers_moved, 120)
        if container in self.stack.api:
            time.sleep(max(0.0, down_for - (time.time() - action.at)))
        self.stack.start(container)  # back as a standby (or as an API replica again)
        if container in self.stack.api:
            wait_for(lambda: _answers(f"{self.stack.api[container]}/health"), 120)
        action.recovery = (
            f"new leader after {failover:.2f} s; all {expected} schedulers running in its container after {moved:.1f} s"
        )
        self.actions.append(action)

    def kill_scheduler(self, scheduler_id: str, service: str) -> None:
        [(location,)] = self.stack.query("SELECT location FROM schedulers WHERE id = %s", scheduler_id)
        host, pid = str(location).rsplit(":", 1)
        container = self.stack.hostnames(service)[host]
        action = Action(
            f"`kill -9` scheduler {scheduler_id} (pid {pid} in {service} {container.rsplit('_', 1)[1]})", time.time()
        )
        podman("exec", container, "python", "-c", f"import os; os.kill({int(pid)}, 9)")

        def restarted() -> bool:
            rows = self.stack.query("SELECT location, state FROM schedulers WHERE id = %s", scheduler_id)
            return bool(rows and rows[0][0] != location and rows[0][1] == "running")

        back = wait_for(restarted, 120)
        action.recovery = f"restarted by the director, running again after {back:.1f} s"
        self.actions.append(action)

    def restart_postgres(self) -> None:
        container = self.stack.container("postgres", 1)
        action = Action("`podman restart` PostgreSQL", time.time())
        podman("restart", "-t", "10", container)
        restarted = time.time()

        def pops_again() -> bool:
            with self.ledger.lock:
                return any(t > restarted for t in self.ledger.pop_ok)

        first_pop = wait_for(pops_again, 120)

        def leading_again() -> bool:
            with suppress(psycopg.Error):
                current = self.stack.leader()
                return (
                    current is not None
                    and self.stack.query(
                        "SELECT renewed_at > to_timestamp(%s) FROM leaders WHERE role = 'director'", restarted
                    )[0][0]
                )
            return False

        leads = wait_for(leading_again, 120)
        expected = len(self.stack.query("SELECT id FROM schedulers"))

        def schedulers_back() -> bool:
            with suppress(psycopg.Error):
                rows = self.stack.query(
                    "SELECT count(*) FROM schedulers WHERE state = 'running' AND heartbeat_at > to_timestamp(%s)",
                    restarted,
                )
                return bool(rows[0][0] >= expected)
            return False

        back = wait_for(schedulers_back, 120)
        action.recovery = (
            f"restart took {restarted - action.at:.1f} s; first successful pop {first_pop:.1f} s after it; "
            f"a director leads (renews) again after {leads:.1f} s; "
            f"all {expected} schedulers heartbeating after {back:.1f} s"
        )
        self.actions.append(action)

    def restart_rabbitmq(self) -> None:
        container = self.stack.container("rabbitmq", 1)
        action = Action("`podman restart` RabbitMQ", time.time())
        podman("restart", "-t", "10", container)
        restarted = time.time()

        def consumed_again() -> bool:
            """An event published after the restart has its task: publisher and consumers are back."""
            with self.ledger.lock:
                after = [key for (org, key), at in self.ledger.published.items() if at > restarted]
            if not after:
                return False
            rows = self.stack.query("SELECT count(*) FROM tasks WHERE data->>'input_ooi' = ANY(%s)", after)
            return bool(rows[0][0])

        back = wait_for(consumed_again, 120, interval=0.2)
        action.recovery = (
            f"restart took {restarted - action.at:.1f} s; the first event published after it became a task "
            f"{back:.1f} s after it"
        )
        self.actions.append(action)


def event_latencies(stack: Stack, ledger: Ledger) -> dict[tuple[str, str], float]:
    """Per event: seconds from the confirmed publish to its task's creation."""
    rows = stack.query(
        "SELECT organisation, data->>'input_ooi', min(extract(epoch from created_at)) FROM tasks GROUP BY 1, 2"
    )
    created = {(org, key): float(at) for org, key, at in rows}
    return {event: created[event] - at for event, at in ledger.published.items() if event in created}


def summarise(stack: Stack, ledger: Ledger, publisher: EventPublisher, all_completed: bool) -> dict[str, Any]:
    per_event = stack.query("SELECT organisation, data->>'input_ooi', count(*) FROM tasks GROUP BY 1, 2")
    by_hash = stack.query("SELECT count(*) FROM (SELECT hash FROM tasks GROUP BY hash HAVING count(*) > 1) AS d")
    statuses = dict(stack.query("SELECT status, count(*) FROM tasks GROUP BY status"))
    recovered = stack.query("SELECT coalesce(sum(attempts), 0) FROM tasks")[0][0]
    created = {(org, key) for org, key, _ in per_event}
    sent = set(ledger.published)
    pops_per_task = Counter(task_id for _, _, task_id in ledger.pops)
    overlaps = 0
    for holds in ledger.holds.values():
        ordered = sorted(holds)
        overlaps += sum(1 for a, b in itertools.pairwise(ordered) if b[0] < a[1])
    return {
        "events_in": len(sent),
        "publish_failures": publisher.failed,
        "tasks": sum(count for _, _, count in per_event),
        "duplicated": sum(1 for _, _, count in per_event if count > 1) + int(by_hash[0][0]),
        "missing": len(sent - created),
        "unexpected": len(created - sent),
        "handed_out": len(pops_per_task),
        "handed_out_twice": sum(1 for n in pops_per_task.values() if n > 1),
        "overlaps": overlaps,
        "recovered": int(recovered),
        "completed": statuses.get("completed", 0),
        "statuses": statuses,
        "all_completed": all_completed,
        "client_errors": len(ledger.errors),
    }


def wait_drained(stack: Stack, ledger: Ledger, timeout: float) -> bool:
    def done() -> bool:
        statuses = dict(stack.query("SELECT status, count(*) FROM tasks GROUP BY status"))
        busy = sum(statuses.get(s, 0) for s in ("queued", "dispatched", "running"))
        return statuses.get("completed", 0) >= len(ledger.published) and busy == 0

    return wait_for(done, timeout, interval=1.0) < float("inf")


@contextmanager
def running(stack: Stack, keep: bool) -> Iterator[Stack]:
    try:
        yield stack
    finally:
        with suppress(Exception):
            stack.save_logs()
        if not keep:
            stack.down()


def bench_env() -> dict[str, str]:
    return dict(FAST_ENV)


def run_split(
    log_dir: Path, *, organisations: int, rate: float, clients: int, gap: float, keep: bool
) -> dict[str, Any]:
    """3 API replicas, 2 directors (process runner), chaos on every component."""
    override = {
        "services": {
            "postgres": {"ports": ["127.0.0.1::5432"]},
            "rabbitmq": {"ports": ["127.0.0.1::5672"]},
            "api": {"environment": bench_env()},
            "director": {"environment": bench_env()},
        }
    }
    stack = Stack("split", override, log_dir)
    orgs = [f"org{n}" for n in range(organisations)]
    report: dict[str, Any] = {"organisations": organisations, "clients": clients}
    started = time.time()
    with running(stack, keep):
        log("split: compose up (postgres, rabbitmq, 3 api, 2 directors)")
        stack.up("api")
        report["up_seconds"] = time.time() - started
        wait_for(lambda: stack.leader() is not None, 120, "no director became leader")
        report["schedulers_start_seconds"] = prepare(stack, orgs, 3)
        log(f"split: {len(orgs) * 3} schedulers running; events at {rate:.0f}/s, {clients} clients")
        ledger = Ledger()
        stop = threading.Event()
        publisher = EventPublisher(stack, ledger, orgs, rate)
        runners = [JobRunner(stack, ledger, stop, index) for index in range(clients)]
        for thread in [publisher, *runners]:
            thread.start()
        chaos = Chaos(stack, ledger, orgs)
        steps: list[tuple[str, Callable[[], None]]] = [
            ("API replica", lambda: chaos.kill_api(stack.container("api", 2))),
            ("leading director", lambda: chaos.kill_leader("director")),
            ("scheduler", lambda: chaos.kill_scheduler(f"boefje-{orgs[1 % len(orgs)]}", "director")),
            ("PostgreSQL", chaos.restart_postgres),
            ("RabbitMQ", chaos.restart_rabbitmq),
        ]
        for name, step in steps:
            time.sleep(gap)
            log(f"split: chaos: {name}")
            step()
            log(f"split: {chaos.actions[-1].what}: {chaos.actions[-1].recovery or chaos.actions[-1].detail}")
        time.sleep(gap)
        publisher.stop_event.set()
        publisher.join(900)
        log("split: all events published; waiting for every task to complete")
        all_completed = wait_drained(stack, ledger, 300)
        stop.set()
        for runner in runners:
            runner.join(30)
        report.update(summarise(stack, ledger, publisher, all_completed))
        report["costs"] = action_costs(chaos.actions, ledger, event_latencies(stack, ledger), time.time())
        report["failover_seconds"] = chaos.failover_seconds
        report["baseline_latency"] = baseline_latency(ledger, event_latencies(stack, ledger), chaos.actions)
        report["events_per_second"] = rate
    report["seconds"] = time.time() - started
    return report


def embedded_override(*, sqlite: bool) -> dict[str, Any]:
    """Compose override: no split services; `embedded` = 2 replicas of `baton serve` (with its director),
    on the shared PostgreSQL, or with sqlite=True on the image's default: a SQLite file per container."""
    with open(COMPOSE_FILES[0]) as compose_file:
        base = yaml.safe_load(compose_file)["services"]["api"]
    environment = {**base["environment"], **bench_env()}
    if sqlite:
        del environment["BATON_DATABASE_URL"]
    embedded = {
        "image": base["image"],
        "command": ["serve"],
        "environment": environment,
        "ports": ["127.0.0.1::8000"],
        "deploy": {"replicas": 2},
        "restart": "unless-stopped",
    }
    return {
        "services": {
            "postgres": {"ports": ["127.0.0.1::5432"]},
            "rabbitmq": {"ports": ["127.0.0.1::5672"]},
            "api": {"deploy": {"replicas": 0}},
            "director": {"deploy": {"replicas": 0}},
            "embedded": embedded,
        }
    }


def run_sqlite(log_dir: Path, *, organisations: int, events_per_org: int, keep: bool) -> dict[str, Any]:
    """The image as it is (no BATON_DATABASE_URL: SQLite in the container's working directory),
    replicated twice behind one RabbitMQ: what each replica knows, holds and hands out."""
    stack = Stack("sqlite", embedded_override(sqlite=True), log_dir)
    orgs = [f"lite{n}" for n in range(organisations)]
    report: dict[str, Any] = {"organisations": organisations}
    started = time.time()
    with running(stack, keep):
        log("sqlite: compose up (2 x `baton serve` on the image's default SQLite file)")
        stack.up("embedded")
        replicas = sorted(stack.api)
        tokens = {name: stack.create_token(name) for name in replicas}  # each replica: its own token table
        publisher = AmqpPublisher(stack.amqp_url)
        for org in orgs:
            publisher.publish(
                "baton.organisations", {"type": "organisation.created", "organisation": {"id": org, "name": org}}
            )
        time.sleep(8)
        for n in range(events_per_org * len(orgs)):
            body = {
                "type": "scan_profile_mutation",
                "operation": "create",
                # Hostname: a type the built-in catalogue's boefjes consume (each replica seeds its own).
                "object": {
                    "primary_key": f"Hostname|internet|host-{n}.example",
                    "object_type": "Hostname",
                    "scan_level": 4,
                },
            }
            publisher.publish(f"{orgs[n % len(orgs)]}__scan_profile_mutations", body)
        publisher.close()
        time.sleep(10)
        rows = []
        for name in replicas:
            with httpx.Client(
                base_url=stack.api[name], headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=10
            ) as http:
                known = sorted(org["id"] for org in http.get("/organisations").json())
                queued = http.get("/tasks", params={"type": "boefje", "limit": 1}).json()["count"]
                popped = len(http.post("/schedulers/boefje/pop", params={"limit": 1000}).json()["results"])
                other = next(org for org in orgs if org not in known) if len(known) < len(orgs) else None
                push = (
                    http.post(f"/queues/boefje-{other}/push", json={"priority": 1, "data": {}}).status_code
                    if other
                    else None
                )
            rows.append(
                {
                    "replica": name.rsplit("_", 1)[1],
                    "organisations": known,
                    "tasks": queued,
                    "popped": popped,
                    "push_elsewhere": (other, push),
                }
            )
        report["replicas"] = rows
        report["events_in"] = events_per_org * len(orgs)
    report["seconds"] = time.time() - started
    return report


def run_embedded(
    log_dir: Path, *, organisations: int, rate: float, clients: int, gap: float, keep: bool
) -> dict[str, Any]:
    """`baton serve` (API + director + thread-runner schedulers in one process) replicated twice."""
    stack = Stack("embedded", embedded_override(sqlite=False), log_dir)
    orgs = [f"emb{n}" for n in range(organisations)]
    report: dict[str, Any] = {"organisations": organisations, "clients": clients}
    started = time.time()
    with running(stack, keep):
        log("embedded: compose up (postgres, rabbitmq, 2 x `baton serve` with the embedded director)")
        stack.up("embedded")
        wait_for(lambda: stack.leader() is not None, 120, "no embedded director became leader")
        report["schedulers_start_seconds"] = prepare(stack, orgs, 3)
        hosts = stack.hostnames("embedded")
        locations = stack.query("SELECT DISTINCT split_part(location, ':', 1) FROM schedulers")
        report["schedulers_in"] = sorted(hosts.get(str(host), str(host)).rsplit("_", 1)[1] for (host,) in locations)
        ledger = Ledger()
        stop = threading.Event()
        publisher = EventPublisher(stack, ledger, orgs, rate)
        runners = [JobRunner(stack, ledger, stop, index) for index in range(clients)]
        for thread in [publisher, *runners]:
            thread.start()
        chaos = Chaos(stack, ledger, orgs)
        time.sleep(gap)
        log("embedded: chaos: kill the leading replica")
        chaos.kill_leader("embedded")
        log(f"embedded: {chaos.actions[-1].what}: {chaos.actions[-1].recovery}")
        locations = stack.query("SELECT DISTINCT split_part(location, ':', 1) FROM schedulers")
        report["schedulers_in_after"] = sorted(
            hosts.get(str(host), str(host)).rsplit("_", 1)[1] for (host,) in locations
        )
        time.sleep(gap)
        publisher.stop_event.set()
        publisher.join(900)
        all_completed = wait_drained(stack, ledger, 300)
        stop.set()
        for runner in runners:
            runner.join(30)
        report.update(summarise(stack, ledger, publisher, all_completed))
        report["costs"] = action_costs(chaos.actions, ledger, event_latencies(stack, ledger), time.time())
        report["failover_seconds"] = chaos.failover_seconds
    report["seconds"] = time.time() - started
    return report


def baseline_latency(ledger: Ledger, latencies: dict[tuple[str, str], float], actions: list[Action]) -> float:
    """Median event-to-task delay of events published before the first action."""
    first = actions[0].at if actions else float("inf")
    quiet = [latencies[e] for e, at in ledger.published.items() if at < first and e in latencies]
    return statistics.median(quiet) if quiet else float("nan")


def action_costs(
    actions: list[Action], ledger: Ledger, latencies: dict[tuple[str, str], float], end: float
) -> list[dict[str, Any]]:
    """Per action, over the time until the next one: client errors, the longest time without a
    successful pop, the slowest publish and the slowest event-to-task delay."""
    rows = []
    for action, following in itertools.zip_longest(actions, actions[1:]):
        until = following.at if following else min(end, action.at + 60)
        errors = sum(1 for t, _ in ledger.errors if action.at <= t < until)
        publishes = [seconds for started, seconds in ledger.publish_seconds if action.at - 1 <= started < until]
        delays = [latencies[e] for e, at in ledger.published.items() if action.at - 1 <= at < until and e in latencies]
        rows.append(
            {
                "what": action.what,
                "recovery": action.recovery or action.detail,
                "window": until - action.at,
                "client_errors": errors,
                "no_pop_seconds": longest_gap(ledger.pop_ok, action.at, until),
                "slowest_publish": max(publishes, default=0.0),
                "slowest_event_to_task": max(delays, default=float("nan")),
            }
        )
    return rows


def write_results(
    path: Path, split: dict[str, Any], embedded: dict[str, Any] | None, sqlite: dict[str, Any] | None, command: str
) -> None:
    def counts(report: dict[str, Any], title: str) -> list[str]:
        return [
            f"| {title} | {report['events_in']} | {report['tasks']} | {report['duplicated']} | {report['missing']} | "
            f"{report['handed_out']} | {report['handed_out_twice']} ({report['overlaps']} at once) | "
            f"{report['completed']}{'' if report['all_completed'] else ' (NOT all)'} | {report['recovered']} | "
            f"{report['client_errors']} |"
        ]

    lines = [
        "# Replication in containers: results",
        "",
        f"Generated by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: Podman "
        f"{_version(['podman', '--version'])}, podman-compose, {os.cpu_count()} cores shared by every container "
        "and the clients; images from `bash scripts/containers.sh` (Debian bookworm packages). "
        "How to run it and what it does: [containers.md](containers.md).",
        "",
        "## Exactly once, with every component killed or restarted",
        "",
        f"Split deployment (deploy/docker-compose.yml): 3 API replicas, 2 directors (process runner), "
        f"1 PostgreSQL, 1 RabbitMQ; {split['organisations']} organisations (3 schedulers each) announced over "
        f"RabbitMQ; {split['events_in']} scan-profile mutations published to RabbitMQ at "
        f"{split['events_per_second']:.0f}/s; {split['clients']} job-runner clients on the host popping through "
        "the replicas' published ports (pop, then PATCH completed).",
        "",
        "| run | events in | tasks | duplicated | missing | handed out | handed out twice | completed | "
        "re-queued by recovery | client errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *counts(split, "split: 3 API + 2 directors"),
    ]
    if embedded:
        lines += counts(embedded, "embedded: 2 x `baton serve`")
    lines += [
        "",
        "Duplicated: events (or task hashes) with more than one task. Missing: confirmed events without a task. "
        "Handed out twice: tasks that more than one pop returned (at once: while another client still held it).",
        "",
        "## What each kill or restart cost (split deployment)",
        "",
        f"Before the first action an event became a task in {split['baseline_latency']:.2f} s (median).",
        "",
        "| action | recovery | client errors | longest time without a successful pop | slowest publish | "
        "slowest event → task |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for cost in split["costs"]:
        lines.append(
            f"| {cost['what']} | {cost['recovery']} | {cost['client_errors']} | {cost['no_pop_seconds']:.1f} s | "
            f"{cost['slowest_publish']:.1f} s | {cost['slowest_event_to_task']:.1f} s |"
        )
    lines += [
        "",
        "Each row covers the time from its action to the next one (the last: up to 60 s). Client errors are "
        "refused connections and 5xx answers, each retried on the next replica.",
    ]
    if embedded:
        lines += [
            "",
            "## The literal question: replicate the container that holds its schedulers in memory",
            "",
            "`baton serve` runs the API, a director and its schedulers (threads) in one process. Two replicas "
            f"of that container on one PostgreSQL, {embedded['organisations']} organisations, "
            f"{embedded['events_in']} events, {embedded['clients']} clients; the leading replica was killed "
            "mid-run.",
            "",
            "| check | result |",
            "|---|---|",
            f"| schedulers running in | replica {', '.join(embedded['schedulers_in'])} only (the leader) |",
            f"| after the leader was killed | {embedded['costs'][0]['recovery']}; schedulers now in replica "
            f"{', '.join(embedded['schedulers_in_after'])} |",
            f"| exactly once | {embedded['tasks']} tasks for {embedded['events_in']} events: "
            f"{embedded['duplicated']} duplicated, {embedded['missing']} missing |",
            f"| handed out twice | {embedded['handed_out_twice']} ({embedded['overlaps']} at once) |",
            f"| longest time without a successful pop | {embedded['costs'][0]['no_pop_seconds']:.1f} s |",
        ]
    if sqlite:
        lines += [
            "",
            "### The same container on the image's defaults (no BATON_DATABASE_URL)",
            "",
            "Without a database URL `baton serve` keeps everything in a SQLite file inside its container, so two "
            f"replicas are two unrelated schedulers. {sqlite['organisations']} organisations announced over the shared "
            f"RabbitMQ, then {sqlite['events_in']} scan-profile mutations of Hostname objects (the built-in catalogue, "
            "which each replica seeds into its own file, has a boefje for them):",
            "",
            "| replica | organisations it knows | boefje tasks it holds | a pop through it returns | "
            "push to the other organisation's queue |",
            "|---|---|---:|---:|---|",
        ]
        for row in sqlite["replicas"]:
            other, status = row["push_elsewhere"]
            push = f"`boefje-{other}`: {status}" if other else "(knows every organisation)"
            lines.append(
                f"| {row['replica']} | {', '.join(row['organisations']) or 'none'} | {row['tasks']} | "
                f"{row['popped']} tasks | {push} |"
            )
    lines += [
        "",
        f"Durations: split run {split['seconds']:.0f} s (compose up {split['up_seconds']:.0f} s)"
        + (f", embedded run {embedded['seconds']:.0f} s" if embedded else "")
        + (f", SQLite run {sqlite['seconds']:.0f} s" if sqlite else "")
        + ".",
    ]
    path.write_text("\n".join(lines) + "\n")


def _version(command: list[str]) -> str:
    with suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.split()[-1]
    return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer events, shorter gaps (a smoke run)")
    parser.add_argument("--skip-embedded", action="store_true", help="only the split deployment")
    parser.add_argument("--keep", action="store_true", help="leave the containers running afterwards")
    parser.add_argument("--output", default=str(ROOT / "docs" / "replication-containers.md"))
    args = parser.parse_args()
    import logging
    import signal

    # SIGTERM (e.g. a killed job) unwinds like an exception, so every stack is taken down.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # refused connections while RabbitMQ starts
    log_dir = Path(tempfile.mkdtemp(prefix="baton-containers-"))
    log(f"logs and compose overrides in {log_dir}")
    quick = args.quick
    split = run_split(
        log_dir,
        organisations=2 if quick else 3,
        rate=10.0 if quick else 15.0,
        clients=4 if quick else 6,
        gap=6.0 if quick else 15.0,
        keep=args.keep and args.skip_embedded,
    )
    print(json.dumps(split, indent=1, default=str), flush=True)
    embedded = None
    if not args.skip_embedded:
        embedded = run_embedded(
            log_dir,
            organisations=2,
            rate=10.0,
            clients=4,
            gap=6.0 if quick else 12.0,
            keep=args.keep,
        )
        print(json.dumps(embedded, indent=1, default=str), flush=True)
    sqlite = None
    if not args.skip_embedded:
        sqlite = run_sqlite(log_dir, organisations=2, events_per_org=25, keep=args.keep)
        print(json.dumps(sqlite, indent=1, default=str), flush=True)
    command = "bash bench/containers.sh" + (" --quick" if quick else "")
    write_results(Path(args.output), split, embedded, sqlite, command)
    log(f"wrote {args.output}; logs in {log_dir}")
    failed = [r for r in (split, embedded) if r and (r["duplicated"] or r["missing"] or not r["all_completed"])]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
