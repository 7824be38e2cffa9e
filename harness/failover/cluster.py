"""A pg_auto_failover formation on loopback: a monitor and two nodes with synchronous replication.

Built with Debian's `pg-auto-failover-cli` and `postgresql-15-auto-failover` (pg_autoctl 2.0) under
one temporary directory, run as the `postgres` user when we are root (pg_autoctl refuses root), on
pg_auto_failover's default timeouts, as an operator would run it. The faults: a plain restart of the
primary's PostgreSQL (its keeper starts it again), a planned failover (`pg_autoctl perform
failover`), and an unplanned one (SIGKILL of the primary's keeper and PostgreSQL).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.waiting import free_port

DATABASE = "baton"
USER = "postgres"  # the URI pg_autoctl prints names no user: clients set PGUSER


def pg_autoctl_missing() -> str | None:
    """Why the formation cannot be built here, or None."""
    if shutil.which("pg_autoctl") is None:
        return "pg_autoctl is not installed (Debian: pg-auto-failover-cli, postgresql-15-auto-failover)"
    if not _pg_bin():
        return "no PostgreSQL binaries under /usr/lib/postgresql"
    return None


def _pg_bin() -> str:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return str(found[-1].parent) if found else ""


@dataclass
class Node:
    name: str
    port: int
    data: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None


class Formation:
    """The monitor and two nodes; `uri` is what `pg_autoctl show uri` prints for the formation."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(tempfile.mkdtemp(prefix="baton-failover-"))
        self.directory.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.directory, USER, USER)
        self.monitor = Node("monitor", free_port(), self.directory / "monitor", self.directory / "monitor.log")
        self.nodes = [
            Node(f"node{n}", free_port(), self.directory / f"node{n}", self.directory / f"node{n}.log") for n in (1, 2)
        ]
        self.uri = ""
        self.env = {
            **os.environ,
            "PATH": f"{_pg_bin()}:{os.environ['PATH']}",
            "HOME": str(self.directory),
            "XDG_CONFIG_HOME": str(self.directory / "config"),
            "XDG_DATA_HOME": str(self.directory / "share"),
        }

    # -- pg_autoctl --------------------------------------------------------------------------------
    def _command(self, *args: str) -> list[str]:
        command = ["pg_autoctl", *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", USER, "--", *command]
        return command

    def autoctl(self, *args: str, timeout: float = 180) -> str:
        result = subprocess.run(
            self._command(*args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
        return result.stdout

    def _run(self, node: Node) -> None:
        log = node.log.open("ab")
        node.process = subprocess.Popen(
            self._command("run", "--pgdata", str(node.data)),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the keeper, its services, PostgreSQL
        )

    def create(self) -> None:
        common = ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"]
        monitor = ["--pgdata", str(self.monitor.data)]
        self.autoctl("create", "monitor", *monitor, "--pgport", str(self.monitor.port), *common)
        self._run(self.monitor)
        monitor_uri = self._wait(lambda: self.autoctl("show", "uri", *monitor, "--formation", "monitor").strip())
        for node in self.nodes:
            self.autoctl(
                "create", "postgres", "--pgdata", str(node.data), "--pgport", str(node.port), "--dbname", DATABASE,
                "--name", node.name, "--monitor", monitor_uri, *common,
            )  # fmt: skip
            self._run(node)
            if node is self.nodes[0]:  # the first node is the primary: the second copies it
                self.wait_for(lambda: self.states().get("node1") in ("single", "primary"))
        self.wait_healthy()
        self.uri = self.autoctl("show", "uri", *monitor, "--formation", "default").strip()

    def state(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = json.loads(
            self.autoctl("show", "state", "--pgdata", str(self.monitor.data), "--json", timeout=30)
        )
        return nodes

    def states(self) -> dict[str, str]:
        """Each node's reported state, where it agrees with the one the monitor assigned."""
        return {
            node["nodename"]: node["current_group_state"]
            for node in self.state()
            if node["current_group_state"] == node["assigned_group_state"]
        }

    def wait_healthy(self, timeout: float = 240) -> None:
        """Until one node is primary and the other a secondary, both as assigned."""
        self.wait_for(lambda: sorted(self.states().values()) == ["primary", "secondary"], timeout)

    def primary_name(self) -> str | None:
        """The node that is primary now, or None while the formation is in transition."""
        try:
            return self.primary().name
        except (RuntimeError, StopIteration, subprocess.TimeoutExpired):
            return None

    def primary(self) -> Node:
        name = next(name for name, state in self.states().items() if state in ("primary", "wait_primary", "single"))
        return next(node for node in self.nodes if node.name == name)

    @staticmethod
    def _wait(probe: Any, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = probe()
                if value:
                    return value
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the formation did not get there in time")
            time.sleep(0.5)

    def wait_for(self, condition: Any, timeout: float = 240) -> None:
        self._wait(condition, timeout)

    # -- faults ------------------------------------------------------------------------------------
    def restart_primary(self) -> Node:
        """Stop the primary's PostgreSQL (fast shutdown); its keeper starts it again."""
        primary = self.primary()
        command = [f"{_pg_bin()}/pg_ctl", "-D", str(primary.data), "-m", "fast", "-w", "stop"]
        if os.geteuid() == 0:
            command = ["runuser", "-u", USER, "--", *command]
        subprocess.run(command, env=self.env, capture_output=True, timeout=120, check=True)
        return primary

    def planned_failover(self) -> Node:
        primary = self.primary()
        self.autoctl("perform", "failover", "--pgdata", str(self.monitor.data), timeout=300)
        return primary

    def kill_primary(self) -> Node:
        """SIGKILL the primary's keeper (its whole process group) and its PostgreSQL."""
        primary = self.primary()
        postmaster = int((primary.data / "postmaster.pid").read_text().split()[0])
        assert primary.process is not None
        os.killpg(primary.process.pid, signal.SIGKILL)
        _kill(postmaster)
        for pid in _children(postmaster):
            _kill(pid)
        return primary

    def restart_node(self, node: Node) -> None:
        """Run a killed node's keeper again: it rejoins as a secondary."""
        self._run(node)

    def stop(self) -> None:
        for node in [*self.nodes, self.monitor]:
            if node.process is not None and node.process.poll() is None:
                os.killpg(node.process.pid, signal.SIGTERM)
        for node in [*self.nodes, self.monitor]:
            if node.process is not None:
                try:
                    node.process.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(node.process.pid, signal.SIGKILL)
        for node in [*self.nodes, self.monitor]:  # a PostgreSQL its keeper left behind
            pid_file = node.data / "postmaster.pid"
            if pid_file.exists():
                _kill(int(pid_file.read_text().split()[0]))

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _children(parent: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(status.parent.name))
    return found
