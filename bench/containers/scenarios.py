"""The three runs: the split deployment with chaos, the embedded `baton serve` replicated, and the
same on the image's default SQLite."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.containers.chaos import Chaos
from bench.containers.clients import OBJECT_TYPE, AmqpPublisher, EventPublisher, JobRunner, Ledger
from bench.containers.measure import action_costs, baseline_latency, event_latencies, summarise, wait_drained
from bench.containers.stack import COMPOSE_FILES, Stack, log, running, wait_for

BOEFJE_ID = "replica-boefje"


# Faster rounds than production so that failover and recovery fit a short run. A pop whose answer is
# lost with a killed replica leaves its task `dispatched`: recovery hands it out again (a new task)
# after the timeout.
# The heartbeat timeout stays the product's (30 s): a scheduler heartbeats between batches only, and
# on two shared cores one batch of a backlog can take longer than a shorter timeout.
FAST_ENV = {
    "BATON_RECONCILE_INTERVAL_SECONDS": "1",
    "BATON_HEARTBEAT_INTERVAL_SECONDS": "1",
    "BATON_POLL_INTERVAL_SECONDS": "0.5",
    "BATON_TASK_TIMEOUT_SECONDS": "20",
    "BATON_TASK_MAX_ATTEMPTS": "5",
    "BATON_LOG_JSON": "true",
}


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
    load_at_start = os.getloadavg()[0]
    with running(stack, keep):
        log("split: compose up (postgres, rabbitmq, 3 api, 2 directors)")
        stack.up("api")
        report["up_seconds"] = time.time() - started
        wait_for(lambda: stack.leader() is not None, 120, "no director became leader")
        report["healthy_at_start"] = stack.healthchecks("postgres", "rabbitmq", "api", "director")
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
        report["healthy_at_end"] = stack.healthchecks("postgres", "rabbitmq", "api", "director")
        report["costs"] = action_costs(chaos.actions, ledger, event_latencies(stack, ledger), time.time())
        report["failover_seconds"] = chaos.failover_seconds
        report["baseline_latency"] = baseline_latency(ledger, event_latencies(stack, ledger), chaos.actions)
        report["events_per_second"] = rate
        report["load"] = (load_at_start, os.getloadavg()[0])
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
                known = sorted(org["id"] for org in http.get("/organisations", params={"limit": 1000}).json())
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
