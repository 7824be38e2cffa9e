"""The stack under test: podman and podman-compose driven from the host, and the waiting helpers."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

ROOT = Path(__file__).resolve().parents[2]


DEPLOY = ROOT / "deploy"


COMPOSE_FILES = [DEPLOY / "docker-compose.yml", DEPLOY / "docker-compose.local.yml"]


PROJECT = "baton-bench"


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
        wait_for(self.postgres_answers, 120, "PostgreSQL did not start")
        wait_for(self.rabbitmq_answers, 180, "RabbitMQ did not start")
        self.compose("up", "-d", "--no-build")
        for name in self.containers(api_service):
            self.api[name] = "http://" + published(name, 8000)
        for name, url in self.api.items():
            wait_for(partial(answers, f"{url}/health"), 180, f"{name} did not answer /health")

    def postgres_answers(self) -> bool:
        with suppress(psycopg.Error), psycopg.connect(self.database_url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
            return True
        return False

    def rabbitmq_answers(self) -> bool:
        import pika

        with suppress(Exception):
            pika.BlockingConnection(pika.URLParameters(self.amqp_url)).close()
            return True
        return False

    def down(self) -> None:
        self.compose("down", "-v", "-t", "5")

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, connect_timeout=5, autocommit=True) as conn:
            # No parameters: None, not an empty tuple, or psycopg reads every `%` (a LIKE pattern) as a placeholder.
            return conn.execute(sql, params or None).fetchall()

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

    def healthchecks(self, *services: str) -> dict[str, bool]:
        """Each container's compose healthcheck (`baton probe`), run once: Podman schedules them only
        with systemd, so they are run on demand, as `podman healthcheck run` does by hand."""
        return {
            name: subprocess.run(["podman", "healthcheck", "run", name], capture_output=True, timeout=60).returncode
            == 0
            for service in services
            for name in self.containers(service)
        }

    def messages_left(self, suffix: str) -> int:
        """Messages still in RabbitMQ's queues whose names end with `suffix` (not consumed, not lost)."""
        command = ["rabbitmqctl", "-q", "list_queues", "name", "messages"]
        try:
            output = podman("exec", self.container("rabbitmq", 1), *command)
        except (RuntimeError, subprocess.SubprocessError):
            return -1  # unknown; reported as such
        counts = (line.split() for line in output.splitlines())
        return sum(int(row[1]) for row in counts if len(row) == 2 and row[0].endswith(suffix) and row[1].isdigit())

    def hostnames(self, service: str) -> dict[str, str]:
        """Container hostname (what `leaders.holder` and `schedulers.location` carry) -> container."""
        return {
            podman("inspect", "--format", "{{.Config.Hostname}}", name).strip(): name
            for name in self.containers(service)
        }

    def heartbeating(self, since: float, host: str | None = None) -> int:
        """Schedulers running whose heartbeat came after `since` (epoch seconds), in `host`'s container
        if given. A scheduler's heartbeat is the later of its row's and its lease holder's last renewal
        (one `lease_holders` row per process renews every lease it holds: storage/control/scheduler_leases.py)."""
        in_host = "" if host is None else " AND split_part(s.location, ':', 1) = %s"
        rows = self.query(
            "SELECT count(*) FROM schedulers AS s WHERE s.state = 'running' AND greatest(s.heartbeat_at,"
            " (SELECT h.renewed_at FROM lease_holders AS h WHERE h.owner = s.owner)) > to_timestamp(%s)" + in_host,
            since,
            *([] if host is None else [host]),
        )
        return int(rows[0][0])

    def first_task_of_events_after(self, published: dict[tuple[str, str], float], since: float) -> float | None:
        """When (epoch seconds, the database's clock: the host's) the first task was created for an
        event confirmed after `since`; None while there is none."""
        after = [key for (_org, key), at in published.items() if at > since]
        if not after:
            return None
        rows = self.query(
            "SELECT min(extract(epoch from created_at)) FROM tasks WHERE data->>'input_ooi' = ANY(%s)", after
        )
        return None if rows[0][0] is None else float(rows[0][0])

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


def answers(url: str, status: int = 200) -> bool:
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


def watch(
    conditions: dict[str, Callable[[], bool]], since: float, timeout: float, interval: float = 0.1
) -> dict[str, float]:
    """Poll every condition not yet seen to hold, each round; per name, the seconds from `since`
    (epoch) to the round that first saw it hold (inf if none did within `timeout`). Watched together,
    no condition's time includes waiting for another."""
    seen: dict[str, float] = {}
    deadline = time.time() + timeout
    while len(seen) < len(conditions) and time.time() < deadline:
        for name, condition in conditions.items():
            if name not in seen and condition():
                seen[name] = time.time() - since
        time.sleep(interval)
    return {name: seen.get(name, float("inf")) for name in conditions}


@contextmanager
def running(stack: Stack, keep: bool) -> Iterator[Stack]:
    try:
        yield stack
    finally:
        with suppress(Exception):
            stack.save_logs()
        if not keep:
            stack.down()
