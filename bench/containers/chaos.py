"""The kills and restarts, each with its own recovery measure."""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass

import psycopg

from bench.containers.clients import Ledger
from bench.containers.stack import Stack, answers, podman, wait_for


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
        wait_for(lambda: answers(f"{self.stack.api[container]}/health"), 120)
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
            wait_for(lambda: answers(f"{self.stack.api[container]}/health"), 120)
        action.recovery = (
            f"new leader after {failover:.2f} s; all {expected} schedulers running in its container after {moved:.1f} s"
        )
        self.actions.append(action)

    def kill_scheduler(self, scheduler_id: str, service: str, attempts: int = 5) -> None:
        """SIGKILL the scheduler's process, named by its row; a row that names a process gone already
        (restarted since: its new process claims the row within moments) is read again."""
        for attempt in range(attempts):
            [(location,)] = self.stack.query("SELECT location FROM schedulers WHERE id = %s", scheduler_id)
            host, pid = str(location).rsplit(":", 1)
            container = self.stack.hostnames(service)[host]
            action = Action(
                f"`kill -9` scheduler {scheduler_id} (pid {pid} in {service} {container.rsplit('_', 1)[1]})",
                time.time(),
            )
            try:
                podman("exec", container, "python", "-c", f"import os; os.kill({int(pid)}, 9)")
                break
            except RuntimeError as exc:
                if "No such process" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(2)

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
