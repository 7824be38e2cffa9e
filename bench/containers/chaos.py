"""The kills and restarts, each with its own recovery measure."""

from __future__ import annotations

import os
import time
from contextlib import suppress
from dataclasses import dataclass, field

import psycopg

from bench.containers.clients import Ledger
from bench.containers.stack import Stack, answers, podman, wait_for, watch


@dataclass
class Action:
    what: str
    at: float
    recovery: str = ""
    detail: str = ""
    window_end: float = 0.0
    # When what was killed or restarted answered again (PostgreSQL, RabbitMQ: the harness could
    # connect; a kill: the kill itself); Baton cannot recover before that.
    back_at: float = 0.0
    # Seconds from `back_at`: "schedulers" (every scheduler running and heartbeating again),
    # "first_event" (the first event confirmed after the action became a task).
    timings: dict[str, float] = field(default_factory=dict)
    load: float = field(default_factory=lambda: os.getloadavg()[0])  # the machine's, when the action began


class Chaos:
    """The kills and restarts, each with its own recovery measure."""

    def __init__(self, stack: Stack, ledger: Ledger, organisations: list[str]) -> None:
        self.stack = stack
        self.ledger = ledger
        self.organisations = organisations
        self.actions: list[Action] = []
        self.failover_seconds: list[float] = []

    def first_event_to_task(self, action: Action, since: float) -> None:
        """Seconds from `action.back_at` until the first event confirmed after `since` had its task
        (the task's creation time, not when this look saw it)."""

        def created() -> float | None:
            with self.ledger.lock:
                published = dict(self.ledger.published)
            with suppress(psycopg.Error):
                return self.stack.first_task_of_events_after(published, since)
            return None

        if wait_for(lambda: created() is not None, 120, interval=0.2) < float("inf"):
            action.timings["first_event"] = (created() or 0.0) - action.back_at

    def kill_api(self, container: str, down_for: float = 3.0) -> None:
        action = Action(f"`podman kill` API replica {container.rsplit('_', 1)[1]}", time.time())
        podman("kill", container)
        time.sleep(down_for)
        self.stack.start(container)
        action.back_at = time.time()  # `podman start` returned: its process runs again
        serving = wait_for(lambda: answers(f"{self.stack.api[container]}/health"), 120, interval=0.05)
        action.timings["serving"] = serving
        action.recovery = (
            f"down {down_for:.0f} s, then `podman start`: serving again {time.time() - action.at:.1f} s after the "
            f"kill, {serving:.1f} s after `podman start` returned"
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

        action.back_at = action.at
        failover = wait_for(new_leader, 120, "no director took over within 120 s", interval=0.05)
        self.failover_seconds.append(failover)
        new_host = self.stack.leader()[0].rsplit(":", 1)[0]  # type: ignore[index]
        expected = len(self.stack.query("SELECT id FROM schedulers"))
        running = {"schedulers": lambda: self.stack.heartbeating(action.at, new_host) >= expected}
        moved = watch(running, action.at, 120)["schedulers"]  # from the kill
        action.timings["schedulers"] = moved
        self.first_event_to_task(action, action.at)
        if container in self.stack.api:
            time.sleep(max(0.0, down_for - (time.time() - action.at)))
        self.stack.start(container)  # back as a standby (or as an API replica again)
        if container in self.stack.api:
            wait_for(lambda: answers(f"{self.stack.api[container]}/health"), 120)
        action.recovery = (
            f"new leader after {failover:.2f} s; all {expected} schedulers running in its container "
            f"{moved:.1f} s after the kill"
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
                # The shell's builtin: a Python interpreter would take a second or more to start on
                # busy cores, all of it counted as the scheduler's recovery.
                podman("exec", container, "sh", "-c", f"kill -9 {int(pid)}")
                break
            except RuntimeError as exc:
                if "No such process" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(2)

        def restarted() -> bool:
            rows = self.stack.query("SELECT location, state FROM schedulers WHERE id = %s", scheduler_id)
            return bool(rows and rows[0][0] != location and rows[0][1] == "running")

        back = wait_for(restarted, 120)
        action.back_at = action.at
        action.timings["schedulers"] = back
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

        def leading_again() -> bool:
            with suppress(psycopg.Error):
                current = self.stack.leader()
                return (
                    current is not None
                    and self.stack.query(
                        "SELECT renewed_at > to_timestamp(%s) FROM leaders WHERE role = 'director'", action.back_at
                    )[0][0]
                )
            return False

        def schedulers_back() -> bool:
            with suppress(psycopg.Error):
                return self.stack.heartbeating(action.back_at) >= expected
            return False

        action.back_at = restarted + wait_for(self.stack.postgres_answers, 120, interval=0.05)
        expected = len(self.stack.query("SELECT id FROM schedulers"))
        seen = watch({"pops": pops_again, "leads": leading_again, "schedulers": schedulers_back}, action.back_at, 120)
        action.timings["schedulers"] = seen["schedulers"]
        self.first_event_to_task(action, restarted)
        action.recovery = (
            f"restart took {restarted - action.at:.1f} s, PostgreSQL answered {action.back_at - restarted:.1f} s "
            f"after it; from then: first successful pop after {seen['pops']:.1f} s, "
            f"a director leads (renews) again after {seen['leads']:.1f} s, "
            f"all {expected} schedulers heartbeating after {seen['schedulers']:.1f} s"
        )
        self.actions.append(action)

    def restart_rabbitmq(self) -> None:
        container = self.stack.container("rabbitmq", 1)
        action = Action("`podman restart` RabbitMQ", time.time())
        podman("restart", "-t", "10", container)
        restarted = time.time()
        action.back_at = restarted + wait_for(self.stack.rabbitmq_answers, 120, interval=0.05)
        self.first_event_to_task(action, restarted)
        first = action.timings.get("first_event", float("inf")) + action.back_at - restarted
        action.recovery = (
            f"restart took {restarted - action.at:.1f} s, RabbitMQ took connections {action.back_at - restarted:.1f} s "
            f"after it; the first event published after the restart became a task {first:.1f} s after the restart"
        )
        self.actions.append(action)
